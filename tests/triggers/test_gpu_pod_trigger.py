"""``GPUPodTrigger`` in an event loop of this process against the Kubernetes emulator, as the
triggerer runs it: the official trigger's events, from one shared watch (no fakes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.triggers.kubernetes import LAST_SEEN_KEY, GPUPodTrigger
from airflow_gpu.triggers.pod_watch import WATCH_LABEL, SharedPodWatch
from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY
from tests.kill_budget import ON_KILL_BUDGET, refused_when_given_up_and_later
from tests.triggers.conftest import ON_KILL_TIMEOUT

# slow: imports cncf-kubernetes' triggers and async hook (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]


def trigger(emulator: KubernetesEmulator, name: str, **options: Any) -> GPUPodTrigger:
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    official = KubernetesPodTrigger(
        pod_name=name,
        pod_namespace="default",
        trigger_start_time=None,  # type: ignore[arg-type]
        kubernetes_conn_id=None,
        config_dict=yaml.safe_load(emulator.kubeconfig()),
        poll_interval=2,
        get_logs=True,
        base_container_name="base",
        **options,
    )
    return GPUPodTrigger.from_official(official)


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def gpu_pod(api: client.CoreV1Api, name: str, script: str, **spec: Any) -> None:
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    api.create_namespaced_pod(
        "default",
        {"metadata": {"name": name, "labels": {WATCH_LABEL: "l4"}},
         "spec": {"restartPolicy": "Never", "containers": [container], **spec}},
    )  # fmt: skip


async def first_event(t: GPUPodTrigger) -> dict[str, Any]:
    async for event in t.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def test_events_are_the_official_triggers_from_one_list_and_one_watch(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    gpu_pod(api, "ok", "sleep 1; echo ::airflow-gpu-result::7")
    gpu_pod(api, "bug", "sleep 1; exit 3")
    gpu_pod(api, "reclaimed", "sleep 60")
    gpu_pod(api, "removed", "sleep 60")
    gpu_pod(api, "stuck", "true", nodeSelector={"no-such": "node"})

    async def body() -> list[dict[str, Any]]:
        runs = [
            asyncio.create_task(first_event(trigger(kubernetes_emulator, name, schedule_timeout=3)))
            for name in ("ok", "bug", "reclaimed", "removed", "stuck")
        ]
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(kubernetes_emulator.preempt, "reclaimed", "default", 0)
        await asyncio.to_thread(api.delete_namespaced_pod, "removed", "default", grace_period_seconds=0)
        return list(await asyncio.gather(*runs))

    ok, bug, reclaimed, removed, stuck = asyncio.run(body())
    assert (ok["status"], ok["name"], ok["namespace"]) == ("success", "ok", "default")
    assert bug["status"] == "failed" and bug["message"] in ("pod failed", "Container state failed")  # as the official
    assert bug[LAST_SEEN_KEY]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    # The kubelet ends a deleted pod Failed before it goes; each event carries the last state seen.
    conditions = {c["type"]: c for c in reclaimed[LAST_SEEN_KEY]["status"]["conditions"]}
    assert reclaimed["status"] == "failed" and conditions["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    assert removed["status"] == "failed" and removed[LAST_SEEN_KEY]["metadata"]["deletionTimestamp"]
    assert LAST_SEEN_KEY not in ok
    assert stuck["status"] == "timeout" and "too long to be scheduled" in stuck["message"]
    assert kubernetes_emulator.api_requests("LIST", "pods") == 1
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1
    assert kubernetes_emulator.api_requests("GET", "pods", "") == 0  # the official trigger GETs each pod every poll
    assert kubernetes_emulator.api_requests("GET", "pods", "log") == 1  # the result line of "ok", once (result_tail)
    assert ok[RESULT_LINE_KEY] == "::airflow-gpu-result::7" and RESULT_LINE_KEY not in bug


def test_it_serializes_as_itself_and_mark_failed_deletes_the_pod(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    gpu_pod(api, "marked", "sleep 60")
    t = trigger(kubernetes_emulator, "marked", termination_grace_period=0)
    path, kwargs = t.serialize()
    assert path == "airflow_gpu.triggers.kubernetes.GPUPodTrigger"
    assert kwargs["pod_name"] == "marked" and GPUPodTrigger(**kwargs).serialize() == (path, kwargs)

    async def body() -> None:
        waiting = asyncio.create_task(first_event(t))
        await asyncio.sleep(1)
        waiting.cancel()
        await t.on_kill()  # what the triggerer of Airflow 3.3+ calls on Mark Failed

    asyncio.run(body())
    from airflow_gpu.testing.polling import wait_for

    wait_for(lambda: not [p for p in api.list_namespaced_pod("default").items if p.metadata.name == "marked"], 30)


def spot_argument(first_name: str, **policy: Any) -> dict[str, Any]:
    """What ``replacement_plan`` hands the trigger, for a pod that sleeps then exits 0."""
    from airflow_gpu.spot.policy import SpotPolicy
    from airflow_gpu.spot.run import SpotRun
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN
    from airflow_gpu.utils.manifest_delta import delta

    spot_policy = SpotPolicy(**policy)

    def manifest(capacity: str) -> dict[str, Any]:
        labels = {WATCH_LABEL: "l4", "airflow-gpu/capacity": capacity, "dag_id": "d", "task_id": "t",
                  "run_id": "r", "try_number": "1"}  # fmt: skip
        notice = {"name": "AIRFLOW_GPU_SPOT_NOTICE_FILE", "value": f"/tmp/airflow-gpu/{NAME_TOKEN}/spot-notice"}
        script = "echo $AIRFLOW_GPU_SPOT_NOTICE_FILE; sleep 1"
        container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script], "env": [notice]}
        return {"metadata": {"name": NAME_TOKEN, "labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]}}  # fmt: skip

    base = manifest("spot")
    return {
        "policy": spot_policy.model_dump(), "candidates": ["L4:1"], "requested_capacity": "spot",
        "state": SpotRun.start(spot_policy, ["L4:1"], "kubernetes", "spot").to_json(), "base": base,
        "base_key": "0/spot", "deltas": {"0/on-demand": delta(base, manifest("on-demand"))},
        "first_name": first_name,
    }  # fmt: skip


def test_the_trigger_replaces_a_reclaimed_pod_itself_and_two_triggers_make_one_replacement(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """Two triggerers run the same trigger (apache/airflow#37180): one replacement, adopted by the other."""
    api = core(kubernetes_emulator)
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN

    plan = spot_argument("train-abc", max_interruptions=3)
    first = json.loads(json.dumps(plan["base"]).replace(NAME_TOKEN, "train-abc"))
    first["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 600"]
    api.create_namespaced_pod("default", first)

    def twin() -> GPUPodTrigger:
        t = trigger(kubernetes_emulator, "train-abc")
        return GPUPodTrigger(**{**t.serialize()[1], "gpu_spot": plan})

    async def body() -> list[dict[str, Any]]:
        runs = [asyncio.create_task(first_event(twin())) for _ in range(2)]
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(kubernetes_emulator.preempt, "train-abc", "default", 0)
        return list(await asyncio.gather(*runs))

    events = asyncio.run(body())
    for event in events:
        assert (event["status"], event["name"]) == ("success", "train-abc-r1")
        state = event["gpu_state"]
        assert state["submissions"] == 1 and len(state["interruptions"]) == 1
        assert state["interruptions"][0]["workload"] == "train-abc"
        assert state["interruptions"][0]["reason"] == "TerminationByKubelet"
    names = {p.metadata.name for p in api.list_namespaced_pod("default").items}
    assert names == {"train-abc-r1"}  # the reclaimed pod deleted (on_finish_action), one replacement
    assert kubernetes_emulator.api_requests("POST", "pods") == 3  # the first, the replacement, the twin's 409
    replaced = api.read_namespaced_pod("train-abc-r1", "default")
    env = {e.name: e.value for e in replaced.spec.containers[0].env}
    assert env["AIRFLOW_GPU_ATTEMPT"] == "2" and env["AIRFLOW_GPU_INTERRUPTIONS"] == "1"
    log = api.read_namespaced_pod_log("train-abc-r1", "default", _preload_content=False).data.decode()
    assert log.strip() == "/tmp/airflow-gpu/train-abc-r1/spot-notice"  # the name is the pod's own in its notice path


def test_a_namespace_that_cannot_be_listed_is_an_error_event_not_a_wait(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """As the official trigger's failing GET is: ``trigger_reentry`` defers again or fails, never a pod
    "that took too long to be scheduled"."""
    api = core(kubernetes_emulator)
    gpu_pod(api, "denied", "sleep 60")
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=403, times=None)
    event = asyncio.run(asyncio.wait_for(first_event(trigger(kubernetes_emulator, "denied")), 30))
    assert event["status"] == "error" and "forbidden" in event["message"]
    assert not SharedPodWatch._loops  # the loop's watch ended with it: nothing keeps a closed loop alive


def test_a_restarted_trigger_goes_on_with_the_pod_it_made(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A triggerer restart starts the trigger again from its first arguments: the first pod is gone
    (replaced); one LIST of the try's pods finds ``-r1`` and the run's state on it, and the trigger waits
    on it, creating nothing and counting the interruption once."""
    api = core(kubernetes_emulator)
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN

    plan = spot_argument("train-xyz", max_interruptions=3)
    plan["base"]["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 3"]
    first = json.loads(json.dumps(plan["base"]).replace(NAME_TOKEN, "train-xyz"))
    first["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 600"]
    api.create_namespaced_pod("default", first)
    arguments = {**trigger(kubernetes_emulator, "train-xyz").serialize()[1], "gpu_spot": plan}

    async def until_replaced() -> None:
        running = asyncio.create_task(first_event(GPUPodTrigger(**arguments)))
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(kubernetes_emulator.preempt, "train-xyz", "default", 0)
        from airflow_gpu.testing.polling import wait_for

        def replaced() -> bool:
            return [p.metadata.name for p in api.list_namespaced_pod("default").items] == ["train-xyz-r1"]

        await asyncio.to_thread(wait_for, replaced, 30)
        running.cancel()  # the triggerer goes away here

    asyncio.run(until_replaced())
    event = asyncio.run(asyncio.wait_for(first_event(GPUPodTrigger(**arguments)), 60))  # a new triggerer
    assert (event["status"], event["name"]) == ("success", "train-xyz-r1")
    assert event["gpu_state"]["submissions"] == 1 and len(event["gpu_state"]["interruptions"]) == 1
    assert [p.metadata.name for p in api.list_namespaced_pod("default").items] == ["train-xyz-r1"]
    assert kubernetes_emulator.api_requests("POST", "pods") == 2  # the first and r1: the restart creates nothing


def first_pod(api: client.CoreV1Api, plan: dict[str, Any], name: str, script: str, **spec: Any) -> None:
    """The pod the worker created before it deferred: the plan's base pod, named."""
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN

    pod = json.loads(json.dumps(plan["base"]).replace(NAME_TOKEN, name))
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    pod["spec"].update(spec)
    api.create_namespaced_pod("default", pod)


def pod_names(api: client.CoreV1Api) -> set[str]:
    return {p.metadata.name for p in api.list_namespaced_pod("default").items}


def test_nothing_is_replaced_past_the_tasks_execution_timeout(kubernetes_emulator: KubernetesEmulator) -> None:
    """KPO hands the trigger ``_execution_deadline``; a pod still pending then ends the wait with ``timeout``.
    That is the task's limit, not a capacity verdict: no next pod (each would time out at once, and be
    replaced again, past the deadline), the worker gets the event."""
    import time

    api = core(kubernetes_emulator)
    plan = spot_argument("late", max_interruptions=3)
    first_pod(api, plan, "late", "true", nodeSelector={"no-such": "node"})
    arguments = trigger(kubernetes_emulator, "late", trigger_kwargs={"_execution_deadline": int(time.time()) + 3})
    t = GPUPodTrigger(**{**arguments.serialize()[1], "gpu_spot": plan})
    event = asyncio.run(asyncio.wait_for(first_event(t), 60))
    assert (event["status"], event["name"]) == ("timeout", "late") and "execution_timeout" in event["message"]
    assert event["gpu_state"]["submissions"] == 0 and event["gpu_state"]["interruptions"] == []
    assert pod_names(api) == {"late"} and kubernetes_emulator.api_requests("POST", "pods") == 1


def test_a_create_the_cluster_refuses_hands_the_run_to_the_worker(kubernetes_emulator: KubernetesEmulator) -> None:
    """A GPU namespace's quota refuses the next pod (403): the trigger does not crash (``__fail__``, the
    interruption lost); the worker gets an ``error`` event with the run's state, interruption recorded, and
    the word to create the next pod itself."""
    from airflow_gpu.triggers.kubernetes import NEXT_KEY

    api = core(kubernetes_emulator)
    plan = spot_argument("quota", max_interruptions=3)
    first_pod(api, plan, "quota", "sleep 600")
    t = GPUPodTrigger(**{**trigger(kubernetes_emulator, "quota").serialize()[1], "gpu_spot": plan})

    async def body() -> dict[str, Any]:
        running = asyncio.create_task(first_event(t))
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        kubernetes_emulator.inject_api_fault(verb="create", resource="pods", status=403, times=None,
                                             message='pods "quota-r1" is forbidden: exceeded quota: gpu')  # fmt: skip
        await asyncio.to_thread(kubernetes_emulator.preempt, "quota", "default", 0)
        return await asyncio.wait_for(running, 60)

    event = asyncio.run(body())
    assert (event["status"], event["name"], event[NEXT_KEY]) == ("error", "quota", True)
    assert "exceeded quota" in event["message"]
    state = event["gpu_state"]
    assert state["submissions"] == 1 and [i["reason"] for i in state["interruptions"]] == ["TerminationByKubelet"]


def test_a_restarted_trigger_goes_on_from_a_capacity_move_it_made_not_from_a_deleted_pod(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The first pod got no spot capacity in time: the trigger deleted it and created ``-r1`` on on-demand.
    A triggerer restart finds the first pod gone; replaying from it would read the deletion as a reclaim
    (``PodDeleted``), stay on spot and adopt the on-demand ``-r1`` under a spot state. The restarted
    trigger takes the run's state from ``-r1`` instead."""
    api = core(kubernetes_emulator)
    plan = spot_argument("moved", max_interruptions=3)
    plan["base"]["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 4"]
    first_pod(api, plan, "moved", "true", nodeSelector={"no-such": "node"})
    arguments = {**trigger(kubernetes_emulator, "moved", schedule_timeout=2).serialize()[1], "gpu_spot": plan}

    async def until_replaced() -> None:
        running = asyncio.create_task(first_event(GPUPodTrigger(**arguments)))
        from airflow_gpu.testing.polling import wait_for

        await asyncio.to_thread(wait_for, lambda: pod_names(api) == {"moved-r1"}, 30)
        running.cancel()  # the triggerer goes away here

    asyncio.run(until_replaced())
    event = asyncio.run(asyncio.wait_for(first_event(GPUPodTrigger(**arguments)), 60))  # a new triggerer
    assert (event["status"], event["name"]) == ("success", "moved-r1")
    state = event["gpu_state"]
    assert state["capacity"] == "on-demand" and state["submissions"] == 1
    assert [i["reason"] for i in state["interruptions"]] != ["PodDeleted"]
    assert api.read_namespaced_pod("moved-r1", "default").metadata.labels["airflow-gpu/capacity"] == "on-demand"
    assert kubernetes_emulator.api_requests("POST", "pods") == 2


def test_mark_failed_deletes_every_pod_of_the_try_the_trigger_may_have_made(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """Mark Failed while the trigger is between two pods (a create landed, its response not yet read):
    ``on_kill`` deletes every running pod of this task try by its labels, not only the one it waited on;
    another try's pod stays."""
    from airflow_gpu.testing.polling import wait_for

    api = core(kubernetes_emulator)
    plan = spot_argument("marked", max_interruptions=3)
    first_pod(api, plan, "marked", "sleep 600")
    first_pod(api, plan, "marked-r1", "sleep 600")  # the create in flight when the task was marked failed
    other = json.loads(json.dumps(plan))
    other["base"]["metadata"]["labels"]["try_number"] = "2"
    first_pod(api, other, "marked-next-try", "sleep 600")
    t = GPUPodTrigger(**{**trigger(kubernetes_emulator, "marked", termination_grace_period=0).serialize()[1],
                         "gpu_spot": plan})  # fmt: skip

    async def body() -> None:
        waiting = asyncio.create_task(first_event(t))
        await asyncio.sleep(1)
        waiting.cancel()  # as the triggerer does, before it calls on_kill
        await t.on_kill()

    asyncio.run(body())
    wait_for(lambda: pod_names(api) == {"marked-next-try"}, 30)


def test_mark_failed_deletes_the_pod_though_the_runner_cancels_on_kill_again(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.3's trigger runner cancels a removed trigger again at every turn of its loop until the
    trigger's task ends (``cancel_triggers``), and ``run_trigger`` swallows a cancel that reaches
    ``on_kill``. Driven as ``run_trigger`` drives it (``on_kill`` inside the task's ``except
    CancelledError``, re-cancelled every 20 ms, with a state read that takes a second), the pod must
    still go. Seen in the end-to-end run: "invoking on_kill", then "trigger completed", pod running.
    The supervisor's channel is faked (tests/triggers/test_kill_guard.py)."""
    from airflow.sdk.execution_time import task_runner

    from tests.triggers.test_kill_guard import Comms, ti

    class Slow(Comms):
        async def asend(self, msg: Any) -> Any:
            await asyncio.sleep(1)
            return await super().asend(msg)

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Slow({"r1": {"train": "failed"}}), raising=False)
    api = core(kubernetes_emulator)
    plan = spot_argument("rekilled", max_interruptions=3)
    first_pod(api, plan, "rekilled", "sleep 600")
    t = GPUPodTrigger(**{**trigger(kubernetes_emulator, "rekilled", termination_grace_period=0).serialize()[1],
                         "gpu_spot": plan})  # fmt: skip
    t.task_instance = ti()

    async def run_trigger() -> None:  # airflow/jobs/triggerer_job_runner.py, run_trigger, 3.3
        try:
            await first_event(t)
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):  # as run_trigger does
                await asyncio.wait_for(t.on_kill(), timeout=30)
            raise

    async def body() -> None:
        task = asyncio.create_task(run_trigger())
        await asyncio.sleep(1)
        while not task.done():  # cancel_triggers, at every turn of the runner's loop
            task.cancel("user action")
            await asyncio.sleep(0.02)
        for _ in range(300):  # the shielded kill goes on in the loop
            if not await asyncio.to_thread(pod_names, api):
                return
            await asyncio.sleep(0.1)

    asyncio.run(body())
    assert pod_names(api) == set()


def test_mark_failed_under_throttling_deletes_the_running_pod_within_the_triggerers_on_kill_budget(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server throttles every delete once (429, ``Retry-After: 4``), and the kill's retry waits it
    out. One delete at a time, in name order, the pod the trigger waits on (``-r3``, sorted last) would be
    reached past the 16 s of ``[triggerer] on_kill_timeout`` set here (its retries stop 2 s before it), after
    which the triggerer gives up on ``on_kill``: the running pod stays, billed. All at once, it goes within
    one wait. (Production: ``Retry-After: 8`` against the 30 s default; the ratio is kept, the waiting cut.)"""
    from airflow_gpu.testing.polling import wait_for

    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(ON_KILL_TIMEOUT))

    api = core(kubernetes_emulator)
    plan = spot_argument("throttled", max_interruptions=3)
    names = ["throttled", "throttled-r1", "throttled-r2", "throttled-r3"]
    for name in names:  # pods of this try that had not ended (creates a twin trigger made, say)
        first_pod(api, plan, name, "sleep 600")
    arguments = trigger(kubernetes_emulator, "throttled-r3", termination_grace_period=0).serialize()[1]
    t = GPUPodTrigger(**{**arguments, "gpu_spot": plan})
    throttled = kubernetes_emulator.inject_api_fault(verb="delete", resource="pods", retry_after=4, times=len(names))

    async def body() -> None:
        waiting = asyncio.create_task(first_event(t))
        await asyncio.sleep(1)
        waiting.cancel()  # as the triggerer does, before it calls on_kill within its budget
        await asyncio.wait_for(t.on_kill(), ON_KILL_TIMEOUT)  # the runner's wait for on_kill

    asyncio.run(body())
    assert throttled.hits == len(names)
    wait_for(lambda: not pod_names(api), 30)


def test_a_kill_the_api_server_keeps_refusing_gives_up_within_the_on_kill_budget_naming_the_pod(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every delete is throttled (429, ``Retry-After: 1``) for good. The triggerer waits ``[triggerer]
    on_kill_timeout`` (4 s here) for ``on_kill``; the kill's deletes are retried within that, not for the
    five minutes ``api_retry`` gives other calls, and an ERROR names the pod left running. Retried on
    after the runner gave up, they ran unowned for minutes."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(ON_KILL_BUDGET))
    api = core(kubernetes_emulator)
    gpu_pod(api, "refused", "sleep 600")
    t = trigger(kubernetes_emulator, "refused", termination_grace_period=0)
    refused = kubernetes_emulator.inject_api_fault(verb="delete", resource="pods", retry_after=1, times=None)
    body = refused_when_given_up_and_later(first_event(t), t.on_kill, lambda: refused.hits, runs_for=1)
    try:
        given_up, later = asyncio.run(body)
    finally:
        kubernetes_emulator.clear_api_faults()
        api.delete_namespaced_pod("refused", "default", grace_period_seconds=0)
    assert given_up >= 2 and later == given_up
    errors = [line for line in capsys.readouterr().out.splitlines() if "[error" in line]  # the trigger's structlog
    assert any("left running: pod default/refused" in e for e in errors), errors


def test_a_triggerer_shutdown_during_a_kill_names_what_it_left_running(
    kubernetes_emulator: KubernetesEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner cancels the trigger while its kill waits out a throttled delete (``Retry-After: 20``),
    then the triggerer stops (``asyncio.run`` cancels every task left). The kill is owned
    (``kill_tasks.running()``) while it runs, and its end is an ERROR naming the pod left running, not a
    silent cancel of a task nobody held."""
    from airflow_gpu.triggers import kill_tasks

    api = core(kubernetes_emulator)
    gpu_pod(api, "stopping", "sleep 600")
    t = trigger(kubernetes_emulator, "stopping", termination_grace_period=0)
    kubernetes_emulator.inject_api_fault(verb="delete", resource="pods", retry_after=20, times=None)

    async def run_trigger() -> None:  # airflow/jobs/triggerer_job_runner.py, run_trigger, 3.3
        try:
            await first_event(t)
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(t.on_kill(), timeout=30)
            raise

    async def body() -> list[str]:
        task = asyncio.create_task(run_trigger())
        await asyncio.sleep(1)
        while not task.done():  # cancel_triggers, at every turn of the runner's loop
            task.cancel("user action")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)  # the kill waits out the throttle
        return [kill.what for kill in kill_tasks.running()]

    try:
        pending = asyncio.run(body())  # then asyncio.run cancels what is left, as a triggerer's exit does
    finally:
        kubernetes_emulator.clear_api_faults()
        api.delete_namespaced_pod("stopping", "default", grace_period_seconds=0)
    assert pending == ["Deleting the pods of trigger for pod default/stopping"]
    assert not kill_tasks.running()
    errors = [line for line in capsys.readouterr().out.splitlines() if "[error" in line]  # the trigger's structlog
    assert any("triggerer stopped" in e and "left running: pod default/stopping" in e for e in errors), errors


def test_before_airflow_3_3_cleanup_on_mark_failed_deletes_every_pod_of_the_try(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Airflow 3.3 the triggerer calls no ``on_kill``: Mark Failed reaches the trigger as ``cleanup``
    once the task has left DEFERRED. The official one deletes only the pod waited on; a replacement of
    this try (the create in flight) must go too, and another try's pod stays. The state is asked in the
    event loop (``asend``): the official ``safe_to_cancel`` asks from a thread, which on a 3.2.0
    triggerer never came back. The supervisor's channel is faked (tests/triggers/test_kill_guard.py)."""
    from airflow.providers.cncf.kubernetes.triggers import pod as official

    from airflow_gpu.triggers import kubernetes as ours
    from tests.triggers.test_kill_guard import answer

    for module in (official, ours):  # Airflow 3.3+ is installed: take the older path, as 3.2 does
        monkeypatch.setattr(module, "AIRFLOW_V_3_3_PLUS", False)
    api = core(kubernetes_emulator)
    plan = spot_argument("cleaned", max_interruptions=3)
    first_pod(api, plan, "cleaned", "sleep 600")
    first_pod(api, plan, "cleaned-r1", "sleep 600")
    other = json.loads(json.dumps(plan))
    other["base"]["metadata"]["labels"]["try_number"] = "2"
    first_pod(api, other, "cleaned-next-try", "sleep 600")
    t = GPUPodTrigger(**{**trigger(kubernetes_emulator, "cleaned", termination_grace_period=0).serialize()[1],
                         "gpu_spot": plan})  # fmt: skip

    from tests.triggers.test_kill_guard import ti

    t.task_instance = ti()  # as the triggerer sets it (airflow's TaskInstance; the fields the read needs)
    comms = answer(monkeypatch, {"r1": {"train": "failed"}})  # Mark Failed: not a triggerer restart

    async def run_trigger() -> None:  # as Airflow 3.2's TriggerRunner.run_trigger: cleanup in a finally
        try:
            await first_event(t)
        finally:
            await t.cleanup()

    async def body() -> None:
        task = asyncio.create_task(run_trigger())
        await asyncio.sleep(1)
        for _ in range(100):  # 3.2's cancel_triggers: cancelled again at every turn until the task ends
            task.cancel()
            await asyncio.sleep(0.02)
            if task.done():
                break
        for _ in range(300):  # the shielded cleanup goes on in the loop
            if await asyncio.to_thread(pod_names, api) == {"cleaned-next-try"}:
                return
            await asyncio.sleep(0.1)

    asyncio.run(body())
    assert [how for how, _, _ in comms.asked] == ["asend"]  # in the loop, never ``send`` from a thread
    assert pod_names(api) == {"cleaned-next-try"}


def test_triggers_that_come_after_the_list_find_their_pods_in_it_without_a_get(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A triggerer restart: the triggers of pods that ended or run meanwhile come over some seconds, after
    the shared watch listed the namespace. Each finds its pod's state in what the list brought; only a
    pod the list did not have is looked up (one GET)."""
    from airflow_gpu.testing.polling import wait_for

    api = core(kubernetes_emulator)
    names = [f"done-{i}" for i in range(12)]
    for name in ["anchor", *names]:
        seconds = "3600" if name == "anchor" else "0"
        container = {
            "name": "base",
            "image": "simulated.local/shard",
            "env": [{"name": "SIMULATED_SECONDS", "value": seconds}],
        }
        spec = {"restartPolicy": "Never", "containers": [container]}
        api.create_namespaced_pod("default", {"metadata": {"name": name, "labels": {WATCH_LABEL: "l4"}}, "spec": spec})
    wait_for(lambda: all(api.read_namespaced_pod(n, "default").status.phase == "Succeeded" for n in names), 30)
    gets = kubernetes_emulator.api_requests("GET", "pods", "")

    async def body() -> list[dict[str, Any]]:
        anchor = asyncio.create_task(first_event(trigger(kubernetes_emulator, "anchor")))
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        late = []
        for name in [*names, "never-made"]:  # one by one, as a triggerer starts them
            late.append(asyncio.create_task(first_event(trigger(kubernetes_emulator, name))))
            await asyncio.sleep(0.05)
        events = list(await asyncio.wait_for(asyncio.gather(*late), 60))
        anchor.cancel()
        return events

    events = asyncio.run(body())
    assert [(e["status"], e["name"]) for e in events[:-1]] == [("success", n) for n in names]
    assert events[-1]["status"] != "success"
    assert kubernetes_emulator.api_requests("GET", "pods", "") - gets == 1  # the pod the list did not have
    assert kubernetes_emulator.api_requests("GET", "pods", "log") == len(names)  # each success's result line
    assert kubernetes_emulator.api_requests("LIST", "pods") == 1


def test_a_kept_pod_the_trigger_replaced_is_let_go_of(kubernetes_emulator: KubernetesEmulator) -> None:
    """``on_finish_action="keep_pod"``: the reclaimed pod stays, and the trigger that replaced it removes the
    provider's finalizer from it (``utils.end_hold``), so it no longer waits for a reader: a deletion (PodGC's,
    a person's) then ends. The replacement keeps it: its end is not read yet."""
    from airflow_gpu.triggers.pod_replacement import NAME_TOKEN
    from airflow_gpu.utils.end_hold import END_HOLD

    api = core(kubernetes_emulator)
    plan = spot_argument("train-abc", max_interruptions=3)
    plan["base"]["metadata"]["finalizers"] = [END_HOLD]  # as ``dress`` builds it
    first = json.loads(json.dumps(plan["base"]).replace(NAME_TOKEN, "train-abc"))
    first["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 600"]
    api.create_namespaced_pod("default", first)
    kept = GPUPodTrigger(**{**trigger(kubernetes_emulator, "train-abc", on_finish_action="keep_pod").serialize()[1],
                            "gpu_spot": plan})  # fmt: skip

    async def body() -> dict[str, Any]:
        run = asyncio.create_task(first_event(kept))
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(kubernetes_emulator.preempt, "train-abc", "default", 0)
        return await run

    event = asyncio.run(body())
    assert (event["status"], event["name"]) == ("success", "train-abc-r1")
    old = api.read_namespaced_pod("train-abc", "default")
    assert old.status.phase == "Failed" and not old.metadata.finalizers  # kept, let go of
    assert api.read_namespaced_pod("train-abc-r1", "default").metadata.finalizers == [END_HOLD]

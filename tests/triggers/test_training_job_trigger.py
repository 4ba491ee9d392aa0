"""``GPUTrainingJobTrigger`` in an event loop of this process against the Kubernetes emulator (its Job
controller runs the Indexed Jobs), as the triggerer runs it: a deferred training over two machines,
its spot run carried on in the trigger. Every Job the cluster ever had is recorded by a watch of
our own, so that "one replacement, created after the old Job was gone" is checked over the whole
run, not read off its end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers import adoption, cluster
from airflow_gpu.triggers.pod_watch import WATCH_LABEL
from airflow_gpu.triggers.training_job import GPUTrainingJobTrigger
from airflow_gpu.utils.manifest_delta import delta
from airflow_gpu.utils.training_job import JOB_LABEL, NAME_TOKEN, STATE_ANNOTATION, job_manifests, with_state
from tests.kill_budget import ON_KILL_BUDGET, refused_when_given_up_and_later
from tests.kubernetes_history import JobHistory
from tests.triggers.conftest import ON_KILL_TIMEOUT

# slow: imports cncf-kubernetes' triggers and async hook (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

INDEX = "batch.kubernetes.io/job-completion-index"
IDENTITY = {"dag_id": "d", "task_id": "train", "run_id": "r", "try_number": "1"}
#: Rank 1 of the first submission trains until it is reclaimed; every later submission finishes.
LONG_FIRST = (
    'echo "rank $JOB_COMPLETION_INDEX attempt $AIRFLOW_GPU_ATTEMPT"; [ "$AIRFLOW_GPU_ATTEMPT" = 1 ] && sleep 600; true'
)


def pod(capacity: str, script: str) -> dict[str, Any]:
    """The pod ``GPUKubernetesOperator`` would build for one machine, as far as a training Job needs."""
    labels = {WATCH_LABEL: "l4", "airflow-gpu/capacity": capacity, **IDENTITY}
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script],
                 "env": [{"name": "AIRFLOW_GPU_ATTEMPT", "value": "1"}]}  # fmt: skip
    return {
        "metadata": {"name": "train-pod-x1", "namespace": "default", "labels": labels},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def plan(first: str, script: str, **policy: Any) -> dict[str, Any]:
    """What the worker hands the trigger (``replacement_plan`` with Job manifests), for two machines."""
    spot = SpotPolicy(**policy)
    run = SpotRun.start(spot, ["L4:1"], "kubernetes", "spot")
    run.submitted(first)

    def manifests(capacity: str) -> dict[str, Any]:
        return job_manifests(pod(capacity, script), NAME_TOKEN, machines=2, port=29500, base_container="base")

    base = manifests("spot")
    return {
        "policy": spot.model_dump(), "candidates": ["L4:1"], "requested_capacity": "spot", "state": run.to_json(),
        "base": base, "base_key": "0/spot", "deltas": {"0/on-demand": delta(base, manifests("on-demand"))},
        "first_name": first,
    }  # fmt: skip


def submit(emulator: KubernetesEmulator, arguments: dict[str, Any]) -> None:
    """The first Job and Service, as the worker creates them before it defers."""
    spot = arguments["plan"]
    named = with_state(
        {k: _named(v, arguments["job_name"]) for k, v in spot["base"].items()}, spot["state"], {}, "base"
    )
    api = clients(emulator)
    api["core"].create_namespaced_service("default", named["service"])
    api["batch"].create_namespaced_job("default", named["job"])


def _named(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(manifest).replace(NAME_TOKEN, name))
    return loaded


def clients(emulator: KubernetesEmulator) -> dict[str, Any]:
    api = config.new_client_from_config(config_file=str(emulator.kubeconfig_path))
    return {"core": client.CoreV1Api(api), "batch": client.BatchV1Api(api)}


def arguments(emulator: KubernetesEmulator, first: str, script: str, **options: Any) -> dict[str, Any]:
    return {
        "job_name": first, "namespace": "default", "plan": plan(first, script, max_interruptions=3),
        "config_dict": yaml.safe_load(emulator.kubeconfig()), "poll_interval": 0.5, "grace_period": 1.0,
        **options,
    }  # fmt: skip


async def final_event(trigger: GPUTrainingJobTrigger, timeout: float = 90) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return await asyncio.wait_for(first(), timeout)


def rank_pod(emulator: KubernetesEmulator, job: str, rank: int, phase: str = "Running") -> str:
    core = clients(emulator)["core"]

    def found() -> str | None:
        pods = core.list_namespaced_pod("default", label_selector=f"{JOB_LABEL}={job},{INDEX}={rank}").items
        return next((p.metadata.name for p in pods if p.status.phase == phase), None)

    return wait_for(found, 60, f"rank {rank} of {job} {phase}")


def test_a_training_that_succeeds_is_one_event_from_one_list_and_watch_of_jobs_and_of_pods(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    script = """echo "rank $JOB_COMPLETION_INDEX"; echo '::airflow-gpu-result::{"loss": 1}'; sleep 1"""
    given = arguments(kubernetes_emulator, "train-ok", script)
    submit(kubernetes_emulator, given)
    trigger = GPUTrainingJobTrigger(**given)
    path, kwargs = trigger.serialize()
    assert path == "airflow_gpu.triggers.training_job.GPUTrainingJobTrigger"
    assert GPUTrainingJobTrigger(**kwargs).serialize() == (path, kwargs)

    event = asyncio.run(final_event(trigger))
    assert (event["status"], event["job"], event["result"]["outcome"]) == ("success", "train-ok", "succeeded")
    assert event["main_pod"].startswith("train-ok-0-")
    assert event["gpu_state"]["submissions"] == 0 and event["gpu_state"]["interruptions"] == []
    emulator = kubernetes_emulator
    # no read per pod, the shared watch tells; one read of the main machine's log, for the result line it carries
    assert emulator.api_requests("GET", "pods") == 1 == emulator.api_requests("GET", "pods", "log")
    assert event["gpu_result_line"] == '::airflow-gpu-result::{"loss": 1}'  # the main machine's
    assert emulator.api_requests("WATCH", "pods") == 1 and emulator.api_requests("WATCH", "jobs") == 1
    # The watch's list, one of the Job's pods made before the trigger held them, one once the Job is judged.
    assert emulator.api_requests("LIST", "pods") <= 3
    assert clients(emulator)["batch"].read_namespaced_job("train-ok", "default")  # the worker cleans up


def test_a_reclaimed_rank_is_replaced_by_the_trigger_once_and_after_the_old_job_is_gone(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """Without a worker round trip; two triggers at once (apache/airflow#37180) make one replacement."""
    given = arguments(kubernetes_emulator, "train-spot", LONG_FIRST)
    submit(kubernetes_emulator, given)

    async def body() -> list[dict[str, Any]]:
        runs = [asyncio.create_task(final_event(GPUTrainingJobTrigger(**given))) for _ in range(2)]
        victim = await asyncio.to_thread(rank_pod, kubernetes_emulator, "train-spot", 1)
        await asyncio.to_thread(kubernetes_emulator.preempt, victim, "default", 0)
        return list(await asyncio.gather(*runs))

    with JobHistory(kubernetes_emulator) as history:
        events = asyncio.run(body())
    for event in events:
        assert (event["status"], event["job"]) == ("success", "train-spot-r1")
        state = event["gpu_state"]
        assert state["submissions"] == 1 and len(state["interruptions"]) == 1
        [record] = state["interruptions"]
        assert (record["workload"], record["outcome"], record["reason"]) == ("train-spot", "preempted",
                                                                             "TerminationByKubelet")  # fmt: skip
    assert history.created() == ["train-spot-r1"]  # the first was made before the watch; one replacement
    history.assert_one_at_a_time()
    api = clients(kubernetes_emulator)
    replaced = api["batch"].read_namespaced_job("train-spot-r1", "default")
    env = {e.name: e.value for e in replaced.spec.template.spec.containers[0].env}
    assert env["AIRFLOW_GPU_ATTEMPT"] == "2" and env["AIRFLOW_GPU_INTERRUPTIONS"] == "1"
    assert env["AIRFLOW_GPU_MAIN_PROCESS_IP"] == "train-spot-r1-0.train-spot-r1"
    assert replaced.spec.template.spec.subdomain == "train-spot-r1"
    assert STATE_ANNOTATION in replaced.metadata.annotations
    services = [s.metadata.name for s in api["core"].list_namespaced_service("default").items]
    assert "train-spot" not in services and "train-spot-r1" in services
    # The trigger's Service is its Job's, as the worker's is: the garbage collector removes it with the Job.
    owners = api["core"].read_namespaced_service("train-spot-r1", "default").metadata.owner_references or []
    assert [(o.api_version, o.kind, o.name, o.uid) for o in owners] == [
        ("batch/v1", "Job", "train-spot-r1", replaced.metadata.uid)
    ]
    api["batch"].delete_namespaced_job("train-spot-r1", "default", propagation_policy="Background")
    ours = {"label_selector": JOB_LABEL}  # not the cluster's own Service ``kubernetes``
    gone = "the Service to go with its Job"
    wait_for(lambda: not api["core"].list_namespaced_service("default", **ours).items, 30, gone)


def test_a_restarted_trigger_goes_on_with_the_job_it_made_and_counts_the_interruption_once(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A triggerer restart starts the trigger from its first arguments: it finds ``-r1`` by its labels,
    takes the run's state from it, and creates nothing."""
    given = arguments(kubernetes_emulator, "train-re", LONG_FIRST.replace("sleep 600; true", "sleep 600; sleep 4"))
    submit(kubernetes_emulator, given)

    async def until_replaced() -> None:
        running = asyncio.create_task(final_event(GPUTrainingJobTrigger(**given)))
        victim = await asyncio.to_thread(rank_pod, kubernetes_emulator, "train-re", 1)
        await asyncio.to_thread(kubernetes_emulator.preempt, victim, "default", 0)
        await asyncio.to_thread(rank_pod, kubernetes_emulator, "train-re-r1", 0)
        running.cancel()  # the triggerer goes away here

    with JobHistory(kubernetes_emulator) as history:
        asyncio.run(until_replaced())
        event = asyncio.run(final_event(GPUTrainingJobTrigger(**given)))  # a new triggerer
    assert (event["status"], event["job"]) == ("success", "train-re-r1")
    assert event["gpu_state"]["submissions"] == 1 and len(event["gpu_state"]["interruptions"]) == 1
    assert history.created() == ["train-re-r1"]
    assert kubernetes_emulator.api_requests("POST", "jobs") == 2  # the worker's, and the one replacement


def test_mark_failed_deletes_the_job_and_its_service(kubernetes_emulator: KubernetesEmulator) -> None:
    given = arguments(kubernetes_emulator, "train-kill", "sleep 600")
    submit(kubernetes_emulator, given)
    trigger = GPUTrainingJobTrigger(**given)

    async def body() -> None:
        waiting = asyncio.create_task(final_event(trigger))
        await asyncio.to_thread(rank_pod, kubernetes_emulator, "train-kill", 1)
        waiting.cancel()
        await trigger.on_kill()  # what the triggerer of Airflow 3.3+ calls on Mark Failed

    asyncio.run(body())
    api = clients(kubernetes_emulator)
    wait_for(lambda: not api["batch"].list_namespaced_job("default").items, 30, "the Job to go")
    wait_for(lambda: not api["core"].list_namespaced_pod("default").items, 30, "its pods to go")
    assert not api["core"].list_namespaced_service("default", label_selector=JOB_LABEL).items


def test_mark_failed_under_throttling_deletes_the_current_job_within_the_triggerers_on_kill_budget(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every delete is throttled once (429, ``Retry-After: 4``) and waited out by the kill's retry. One object
    at a time in name order, the current Job (``-r2``, sorted last) would be reached past the 16 s of
    ``[triggerer] on_kill_timeout`` set here (its retries stop 2 s before it) and run on, billed; all at once,
    it goes within one wait. (Production: ``Retry-After: 8`` against the 30 s default; the ratio is kept.)"""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(ON_KILL_TIMEOUT))
    names = ["train-slow", "train-slow-r1", "train-slow-r2"]
    for name in names:  # Jobs of this try that had not ended (a twin trigger's, say)
        submit(kubernetes_emulator, arguments(kubernetes_emulator, name, "sleep 600"))
    trigger = GPUTrainingJobTrigger(**arguments(kubernetes_emulator, "train-slow-r2", "sleep 600"))
    throttled = kubernetes_emulator.inject_api_fault(verb="delete", retry_after=4, times=2 * len(names))

    async def body() -> None:
        waiting = asyncio.create_task(final_event(trigger))
        await asyncio.sleep(1)
        waiting.cancel()  # as the triggerer does, before it calls on_kill within its budget
        await asyncio.wait_for(trigger.on_kill(), ON_KILL_TIMEOUT)  # the runner's wait for on_kill

    asyncio.run(body())
    assert throttled.hits == 2 * len(names)  # each Job and each Service once
    api = clients(kubernetes_emulator)
    wait_for(lambda: not api["batch"].list_namespaced_job("default").items, 30, "the Jobs to go")
    assert not api["core"].list_namespaced_service("default", label_selector=JOB_LABEL).items


def test_a_kill_the_api_server_keeps_refusing_gives_up_within_the_on_kill_budget_naming_the_job(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every delete is throttled (429, ``Retry-After: 1``) for good. The kill's deletes are retried within
    ``[triggerer] on_kill_timeout`` (4 s here), not for the minutes ``api_retry`` gives other calls after the
    runner gave up on ``on_kill``; an ERROR names the Job and Service left running."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(ON_KILL_BUDGET))
    given = arguments(kubernetes_emulator, "train-refused", "sleep 600")
    submit(kubernetes_emulator, given)
    trigger = GPUTrainingJobTrigger(**given)
    refused = kubernetes_emulator.inject_api_fault(verb="delete", retry_after=1, times=None)
    body = refused_when_given_up_and_later(final_event(trigger), trigger.on_kill, lambda: refused.hits, runs_for=1)
    try:
        given_up, later = asyncio.run(body)
    finally:
        kubernetes_emulator.clear_api_faults()
        clients(kubernetes_emulator)["batch"].delete_namespaced_job(
            "train-refused", "default", propagation_policy="Background"
        )
    assert given_up >= 2 and later == given_up
    errors = [line for line in capsys.readouterr().out.splitlines() if "[error" in line]  # the trigger's structlog
    assert any("left running: training Job default/train-refused, Service default/train-refused" in e for e in errors)


def test_a_job_deleted_by_someone_else_ends_the_run_as_deleted(kubernetes_emulator: KubernetesEmulator) -> None:
    given = arguments(kubernetes_emulator, "train-gone", "sleep 600")
    submit(kubernetes_emulator, given)

    async def body() -> dict[str, Any]:
        waiting = asyncio.create_task(final_event(GPUTrainingJobTrigger(**given)))
        await asyncio.to_thread(rank_pod, kubernetes_emulator, "train-gone", 0)
        batch = clients(kubernetes_emulator)["batch"]
        await asyncio.to_thread(batch.delete_namespaced_job, "train-gone", "default", propagation_policy="Background")
        return await waiting

    with JobHistory(kubernetes_emulator) as history:
        event = asyncio.run(body())
    assert (event["status"], event["job"]) == ("failed", "train-gone")
    assert (event["result"]["outcome"], event["result"]["reason"]) == ("deleted", "JobDeleted")
    assert event["gpu_state"]["interruptions"] == [] and history.created() == []  # not resubmitted


def test_an_application_failure_in_one_rank_is_not_resubmitted(kubernetes_emulator: KubernetesEmulator) -> None:
    """Rank 1 exits 3; the controller then deletes rank 0, which a reclaim would explain but a bug does not."""
    script = '[ "$JOB_COMPLETION_INDEX" = 1 ] && { sleep 1; echo "no such dataset"; exit 3; }; sleep 600'
    given = arguments(kubernetes_emulator, "train-bug", script)
    submit(kubernetes_emulator, given)
    with JobHistory(kubernetes_emulator) as history:
        event = asyncio.run(final_event(GPUTrainingJobTrigger(**given)))
    assert (event["status"], event["job"]) == ("failed", "train-bug")
    result = event["result"]
    assert (result["outcome"], result["exit_code"]) == ("application", 3)
    assert event["culprit"]["metadata"]["labels"][INDEX] == "1"
    assert event["gpu_state"]["interruptions"] == [] and history.created() == []


#: A machine that ignores SIGTERM: its pod goes only when its grace period ends.
STUBBORN = 'trap "" TERM; echo "rank $JOB_COMPLETION_INDEX"; sleep 600'


def connection(emulator: KubernetesEmulator) -> cluster.ClusterConnection:
    return cluster.ClusterConnection(config_dict=yaml.safe_load(emulator.kubeconfig()))


def this_try(kind: str, name: str, script: str, grace: int) -> dict[str, Any]:
    """A Job (of two machines) or a pod of this task try, as the trigger creates it."""
    if kind == "pods":
        made = pod("spot", script)
        made["metadata"]["name"] = name
        made["spec"]["terminationGracePeriodSeconds"] = grace
        return made
    job = job_manifests(pod("spot", script), name, machines=2, port=29500, base_container="base")["job"]
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return job


@pytest.mark.parametrize("kind", ["jobs", "pods"])
def test_an_object_of_this_try_being_deleted_is_waited_out_and_made_anew_not_adopted(
    kubernetes_emulator: KubernetesEmulator, kind: str
) -> None:
    """A Job deleted in the foreground keeps its name until its pods are gone (a pod, until its grace period
    ends), and a create in that window answers 409 AlreadyExists. Adopting it would follow an object about to
    vanish: the create waits for it to go and makes it anew, as a create a moment later would have."""
    api, name = clients(kubernetes_emulator), f"dying-{kind}"
    manifest = this_try(kind, name, STUBBORN, grace=4)
    if kind == "jobs":
        api["batch"].create_namespaced_job("default", manifest)
        for rank in (0, 1):
            rank_pod(kubernetes_emulator, name, rank)
        read, delete = api["batch"].read_namespaced_job, api["batch"].delete_namespaced_job
    else:
        api["core"].create_namespaced_pod("default", manifest)
        wait_for(lambda: api["core"].read_namespaced_pod(name, "default").status.phase == "Running", 60, "Running")
        read, delete = api["core"].read_namespaced_pod, api["core"].delete_namespaced_pod
    first = read(name, "default").metadata.uid
    delete(name, "default", propagation_policy="Foreground")
    assert read(name, "default").metadata.deletion_timestamp is not None  # the window: the name is held

    with JobHistory(kubernetes_emulator) as history:
        adopted = asyncio.run(cluster.create_or_adopt(connection(kubernetes_emulator), kind, "default", manifest))
    assert adopted is False
    made = read(name, "default")
    assert made.metadata.uid != first and made.metadata.deletion_timestamp is None
    if kind == "jobs":
        assert history.created() == [name]  # after the dying one was gone, never beside it
        history.assert_one_at_a_time()


def test_an_object_still_being_deleted_after_the_wait_fails_the_create_saying_what_holds_the_name(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finalizer nobody removes (a controller that is down) keeps a deleted Job for good: the create gives up
    after ``DELETE_WAIT_SECONDS`` and the pods' grace period, and creates nothing."""
    monkeypatch.setattr(adoption, "DELETE_WAIT_SECONDS", 1.0)
    api, name = clients(kubernetes_emulator), "held"
    manifest = this_try("jobs", name, "sleep 600", grace=1)
    held = {**manifest, "metadata": {**manifest["metadata"], "finalizers": ["example.com/hold"]}}
    api["batch"].create_namespaced_job("default", held)
    api["batch"].delete_namespaced_job(name, "default", propagation_policy="Background")

    with pytest.raises(adoption.StillBeingDeleted, match=r"Job default/held .* still being deleted") as raised:
        asyncio.run(cluster.create_or_adopt(connection(kubernetes_emulator), "jobs", "default", manifest))
    assert "example.com/hold" in str(raised.value)
    assert kubernetes_emulator.api_requests("POST", "jobs") == 2  # the first, and the create that met it
    api["batch"].patch_namespaced_job(name, "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: not api["batch"].list_namespaced_job("default").items, 30, "the Job to go")


def test_an_object_of_that_name_from_another_try_is_never_adopted(kubernetes_emulator: KubernetesEmulator) -> None:
    """The name is the try's digest, but a name is a slot: only the labels say whose the object is."""
    manifest = this_try("jobs", "other-try", "sleep 600", grace=1)
    theirs = json.loads(json.dumps(manifest).replace('"try_number": "1"', '"try_number": "2"'))
    clients(kubernetes_emulator)["batch"].create_namespaced_job("default", theirs)
    with pytest.raises(cluster.NotThisTaskTry, match=r"Job default/other-try .* try_number='2' is not '1'"):
        asyncio.run(cluster.create_or_adopt(connection(kubernetes_emulator), "jobs", "default", manifest))

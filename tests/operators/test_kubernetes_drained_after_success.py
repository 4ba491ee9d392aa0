"""A pod that succeeded and was then deleted by a node drain before the operator read its end (issue 26).

The soak's defect: the pod printed its result line and exited 0, a drain (cordon, then the Eviction
API) deleted the completed pod, and the operator, finding it gone on a cordoned node, took it for a
preemption and ran the workload again. A pod last seen ``Succeeded`` is a success whatever happened
to it afterwards: one pod ever, no interruption recorded, the task succeeds. Both paths: the
worker's own wait (sync) and the trigger's (deferred), against the Kubernetes emulator over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.testing.kubernetes.cluster import NodeSpec
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.volumes import namespaces_available
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.kubernetes import LAST_SEEN_KEY
from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY
from airflow_gpu.utils.end_hold import END_HOLD, RELEASE_PATCH, STRATEGIC_MERGE
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY, PROFILE_XCOM_KEY
from tests.operators.task_context import Store, Ti

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

RESULT = "echo '::airflow-gpu-result::{\"loss\": 0.5}'"


def api(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


@pytest.fixture
def spot_l4(kubernetes_emulator: KubernetesEmulator) -> KubernetesEmulator:
    """The demo cluster with a spot L4 node: its spot nodes are H100s, its L4 node on-demand, so a spot L4
    pod would stay Pending (unschedulable) until ``capacity_timeout``."""
    node = NodeSpec("gpu-spot-l4", "L4:4", "spot", "g6.24xlarge", {"cpu": "96", "memory": "384Gi"})
    kubernetes_emulator.add_node(node)
    return kubernetes_emulator


def operator(emulator: KubernetesEmulator, script: str = RESULT, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", capacity="spot", cmds=["sh", "-c", script],
        gpu_profile=False, namespace="default", kubernetes_conn_id=None,
        config_file=str(emulator.kubeconfig_path), startup_check_interval_seconds=1, **kwargs,
    )  # fmt: skip


def context() -> Any:
    return {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None, "task_state_store": Store()}


def deleted(core: client.CoreV1Api, name: str) -> bool:
    """The pod is gone, or being deleted and kept by the provider's finalizer (``utils.end_hold``) until read."""
    found = [p for p in core.list_namespaced_pod("default").items if p.metadata.name == name]
    return not found or (found[0].metadata.deletion_timestamp is not None and END_HOLD in found[0].metadata.finalizers)


def gone_for_good(core: client.CoreV1Api, name: str) -> None:
    """The provider's finalizer removed by hand from a deleted pod, which then goes: the pod of a provider
    version without it, or one a person released (``kubectl patch``): the path where nothing of it is left."""
    core.patch_namespaced_pod(name, "default", RELEASE_PATCH, _content_type=STRATEGIC_MERGE)
    wait_for(lambda: not [p for p in core.list_namespaced_pod("default").items if p.metadata.name == name], 30,
             "the pod gone")  # fmt: skip


def drain_when_succeeded(emulator: KubernetesEmulator, name: str) -> None:
    """Wait until the pod is ``Succeeded``, then drain its node and wait until the pod is deleted (kept)."""
    core = api(emulator)
    pod = wait_for(lambda: (p := core.read_namespaced_pod(name, "default")).status.phase == "Succeeded" and p, 60,
                   "the pod to succeed")  # fmt: skip
    assert name in emulator.drain(pod.spec.node_name)
    wait_for(lambda: deleted(core, name), 30, "the drained pod to be deleted")


def pods_ever(emulator: KubernetesEmulator) -> list[str]:
    """Every pod the namespace ever had, deleted ones included (the emulator's phase clock)."""
    return [entry["name"] for entry in emulator.pod_phase_times("default")]


def test_a_pod_drained_after_it_succeeded_is_a_success_not_a_preemption(spot_l4: KubernetesEmulator) -> None:
    """Sync: KPO has followed the log (the result line among it) and seen the base container end; the drain
    deletes the pod before KPO reads the pod's end. Before, the operator classified the pod as it was created
    (Pending, on a cordoned node): a preemption, and it ran the workload again."""
    op = operator(spot_l4)
    original = op.pod_manager.await_pod_completion
    drained: list[str] = []

    def drained_first(pod: Any, *args: Any, **kwargs: Any) -> Any:
        if not drained:  # the first pod only: a re-run would succeed, and be counted
            drained.append(pod.metadata.name)
            drain_when_succeeded(spot_l4, pod.metadata.name)
        return original(pod, *args, **kwargs)

    op.pod_manager.await_pod_completion = drained_first  # type: ignore[method-assign]
    ctx = context()
    assert op.execute(ctx) == {"loss": 0.5}
    assert pods_ever(spot_l4) == drained, pods_ever(spot_l4)  # one pod ever: never run again
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []  # no interruption recorded
    assert ctx["ti"].xcom["return_value"] == {"loss": 0.5}  # from the result line followed before the drain


def first_event(trigger: Any) -> dict[str, Any]:
    """The trigger run to its first event (two minutes at most), its payload."""

    async def run() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(run(), 120))


def succeeded_then_drained(emulator: KubernetesEmulator, ctx: Any, **kwargs: Any) -> tuple[dict[str, Any], Any]:
    """Defer, run the trigger to its ``success`` event, then drain the pod away before the task resumes, for
    good (``gone_for_good``); the event and the deferral's kwargs."""
    with pytest.raises(TaskDeferred) as deferred:
        operator(emulator, deferrable=True, **kwargs).execute(ctx)

    event = first_event(deferred.value.trigger)
    assert event["status"] == "success", event
    drain_when_succeeded(emulator, event["name"])
    gone_for_good(api(emulator), event["name"])
    return event, deferred.value.kwargs


def test_a_deferred_pod_drained_after_it_succeeded_is_a_success_not_a_preemption(
    spot_l4: KubernetesEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """Deferred: the trigger saw the pod succeed; a drain deletes it before the task resumes. The task
    succeeds, runs nothing again, and returns the result: the trigger read the result line from the pod's
    log when it saw the success and carried it in the event (the worker follows no log while deferred;
    before, the task succeeded with no ``return_value``: the soak's mapped shards at seed 9)."""
    ctx = context()
    event, kwargs = succeeded_then_drained(spot_l4, ctx)
    assert event[RESULT_LINE_KEY] == '::airflow-gpu-result::{"loss": 0.5}'
    capfd.readouterr()
    assert operator(spot_l4, deferrable=True).trigger_reentry(ctx, event, **kwargs) == {"loss": 0.5}
    assert pods_ever(spot_l4) == [event["name"]], pods_ever(spot_l4)
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert ctx["ti"].xcom["return_value"] == {"loss": 0.5}
    said = capfd.readouterr().out
    assert "succeeded and was then deleted before its end was read; its result line had been read" in said, said


def test_a_deferred_pod_without_a_result_line_drained_after_success_says_why_it_returns_nothing(
    spot_l4: KubernetesEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """The same, for a workload that printed no result line: nothing to carry, and the task says that the
    result could not be read and why, rather than returning something else."""
    ctx = context()
    event, kwargs = succeeded_then_drained(spot_l4, ctx, script="echo trained")
    assert RESULT_LINE_KEY not in event
    capfd.readouterr()
    assert operator(spot_l4, "echo trained", deferrable=True).trigger_reentry(ctx, event, **kwargs) is None
    assert pods_ever(spot_l4) == [event["name"]], pods_ever(spot_l4)
    assert "return_value" not in ctx["ti"].xcom
    said = capfd.readouterr().out
    assert "deleted after it succeeded, before its result could be read" in said, said


def test_a_deferred_pod_whose_workload_ended_before_the_drain_is_not_replaced(spot_l4: KubernetesEmulator) -> None:
    """Deferred, the pod deleted while the trigger waited: the watch's last state shows the base container
    ended with exit 0 and then the drain's ``DisruptionTarget`` (a sidecar kept the pod Running). The worker
    resumes with the ``failed`` event and that state, finds the pod gone, and succeeds: nothing runs again."""
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        operator(spot_l4, deferrable=True).execute(ctx)
    name = deferred.value.trigger.pod_name
    core = api(spot_l4)
    pod = wait_for(lambda: (p := core.read_namespaced_pod(name, "default")).status.phase == "Succeeded" and p, 60,
                   "the pod to succeed")  # fmt: skip
    last_seen = core.api_client.sanitize_for_serialization(pod)
    finished = last_seen["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    last_seen["status"]["phase"] = "Running"  # its base container ended, a sidecar still ran
    drained_at = (datetime.fromisoformat(finished.replace("Z", "+00:00")) + timedelta(seconds=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    last_seen["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": drained_at}
    )  # fmt: skip
    spot_l4.drain(pod.spec.node_name)
    wait_for(lambda: deleted(core, name), 30, "the drained pod to be deleted")
    gone_for_good(core, name)
    event = {"status": "failed", "namespace": "default", "name": name, "message": f"Pod default/{name} was deleted",
             "last_log_time": None, LAST_SEEN_KEY: last_seen}  # fmt: skip
    assert operator(spot_l4, deferrable=True).trigger_reentry(ctx, event, **deferred.value.kwargs) is None
    assert pods_ever(spot_l4) == [name], pods_ever(spot_l4)
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []


def test_a_succeeded_pod_whose_log_is_gone_keeps_the_result_line_followed(spot_l4: KubernetesEmulator) -> None:
    """The soak (seed 9): PodGC deleted the completed pod between KPO's last read of it and the operator's
    read of its log (404). The result line had been followed while the pod ran: it is the task's result.
    The log's loss is played by the operator's own log read (``ClusterReads.output``) answering 404."""
    op = operator(spot_l4)
    op.reads.output = lambda pod, container: (None, "its log could not be read (404 Not Found)")  # type: ignore[method-assign]
    ctx = context()
    assert op.execute(ctx) == {"loss": 0.5}
    assert ctx["ti"].xcom["return_value"] == {"loss": 0.5}
    assert len(pods_ever(spot_l4)) == 1


def test_a_followed_result_line_that_is_not_json_is_taken_as_cut_not_as_a_bug(spot_l4: KubernetesEmulator) -> None:
    """KPO's log follower hands on a line cut off when its stream ends; with the log gone, such a line cannot
    be told from a workload's bad one, and the task succeeds without a result rather than failing with no
    retry (``followed_output``)."""
    op = operator(spot_l4, "echo '::airflow-gpu-result::{\"loss\": 0.'")
    op.reads.output = lambda pod, container: (None, "its log could not be read (404 Not Found)")  # type: ignore[method-assign]
    ctx = context()
    assert op.execute(ctx) is None
    assert "return_value" not in ctx["ti"].xcom


def gone_when(emulator: KubernetesEmulator, name: str, phase: str, grace: int) -> None:
    """Wait until the pod is in ``phase``, delete it through the API with ``grace`` seconds (PodGC deletes a
    completed pod with 0), and wait until it is gone."""
    core = api(emulator)
    wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == phase, 60, f"the pod {phase}")
    core.delete_namespaced_pod(name, "default", grace_period_seconds=grace)
    wait_for(lambda: deleted(core, name), 60, "the pod to be deleted")


def profiled(emulator: KubernetesEmulator, script: str) -> GPUKubernetesOperator:
    """A profiled pod (the default); a test deletes it behind the operator's back."""
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", capacity="spot", cmds=["sh", "-c", script],
        namespace="default", kubernetes_conn_id=None, config_file=str(emulator.kubeconfig_path),
        startup_check_interval_seconds=1,
    )  # fmt: skip


def test_a_profiled_pod_deleted_before_its_success_was_seen_is_a_success_by_its_profile(
    spot_l4: KubernetesEmulator,
) -> None:
    """The soak (seed 463621002, shard 26): the shard printed its result and exited 0, and PodGC deleted the
    completed pod before KPO read its end, so the operator had seen it Running only; it took the pod for one
    deleted while it ran, failed the try, and the retry ran the workload again. The profiler's end report,
    followed with the log, says the command exited 0 with no signal: a success, with its result, once. The
    deletion comes when KPO's log follow has ended, before it reads the pod again (``container_is_running``):
    PodGC's deletion of a completed pod (``delete_by_pod_gc``), with grace 0, and the provider's finalizer
    removed by hand: the pod gone for good, as one made before the finalizer was (``utils.end_hold``)."""
    op = profiled(spot_l4, f"sleep 2; {RESULT}")  # seen Running by KPO's start, as in the soak
    real, core = op.pod_manager.container_is_running, api(spot_l4)

    def deleted_first(pod: Any, container_name: str) -> Any:
        name = pod.metadata.name
        if name not in pods_ever(spot_l4)[1:] and [p for p in core.list_namespaced_pod("default").items
                                                    if p.metadata.name == name]:  # fmt: skip
            wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == "Succeeded", 60, "success")
            spot_l4.delete_by_pod_gc(name)
            core.patch_namespaced_pod(name, "default", RELEASE_PATCH, _content_type=STRATEGIC_MERGE)  # gone for good
            wait_for(lambda: name not in [p.metadata.name for p in core.list_namespaced_pod("default").items], 60,
                     "the pod gone")  # fmt: skip
        return real(pod, container_name)

    op.pod_manager.container_is_running = deleted_first  # type: ignore[method-assign]
    ctx = context()
    assert op.execute(ctx) == {"loss": 0.5}
    assert len(pods_ever(spot_l4)) == 1
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert ctx["ti"].xcom[PROFILE_XCOM_KEY]["exit_code"] == 0  # the followed report is the task's profile


def test_a_profiled_pod_deleted_while_it_ran_is_not_a_success_even_if_it_exits_0_on_the_sigterm(
    spot_l4: KubernetesEmulator,
) -> None:
    """A deletion through the API while the pod runs sends SIGTERM first; a workload that checkpoints and
    exits 0 on it did not finish, though its pod ends ``Succeeded`` (the kubelet's phase for exit 0). The
    provider's finalizer keeps the pod; the profiler's end in its termination message lists the SIGTERM
    (``ended_on_a_deletion_signal``), and the try fails as for any deletion. The deletion comes once the
    workload has printed its result line, its trap set before it."""
    from airflow.sdk.exceptions import AirflowException

    def delete_once_running() -> None:
        name = wait_for(lambda: next(iter(spot_l4.printed("::airflow-gpu-result::")), None), 60, "a result line")
        gone_when(spot_l4, name, "Running", 5)

    deleter = threading.Thread(target=delete_once_running, daemon=True)
    deleter.start()
    script = f"trap 'exit 0' TERM; {RESULT}; sleep 60 & wait"
    with pytest.raises(AirflowException, match="deleted"):
        profiled(spot_l4, script).execute(context())
    deleter.join(60)
    [times] = spot_l4.pod_phase_times("default")
    assert "Succeeded" in times["phases"] and "Failed" not in times["phases"], times  # exit 0 on the SIGTERM


@pytest.mark.skipif(not namespaces_available(), reason="the termination-message file needs mount namespaces (root)")
def test_a_deferred_pod_whose_node_went_with_its_log_returns_the_result_from_its_termination_message(
    spot_l4: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak (seed 463621002: 18 shards, 6 trainings): the node went 0.1 s after the pod succeeded, PodGC
    deleted the pod, and the trigger's read of the log found it gone; the task succeeded without its result.
    The profiler left the result line in the termination message, which the watch saw with the success.
    The node's removal (PodGC then deletes its pods) is put between the watch's success and the trigger's
    log read by wrapping ``cluster.pod_log_tail`` (ours); the read itself is the real one, and answers 404."""
    from airflow_gpu.triggers import cluster

    real = cluster.pod_log_tail

    async def gone_first(connection: Any, namespace: str, name: str, *args: Any) -> str:
        node = (await asyncio.to_thread(api(spot_l4).read_namespaced_pod, name, namespace)).spec.node_name
        await asyncio.to_thread(spot_l4.remove_node, node)  # returns once PodGC has deleted its pods
        return await real(connection, namespace, name, *args)

    monkeypatch.setattr(cluster, "pod_log_tail", gone_first)
    ctx = context()
    profiled_op = profiled(spot_l4, RESULT)
    profiled_op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        profiled_op.execute(ctx)

    event = first_event(deferred.value.trigger)
    assert event["status"] == "success" and event[RESULT_LINE_KEY] == '::airflow-gpu-result::{"loss": 0.5}', event
    core = api(spot_l4)
    assert deleted(core, event["name"])  # kept by the finalizer, its log gone (404)
    resumed = profiled(spot_l4, RESULT)
    resumed.deferrable = True
    assert resumed.trigger_reentry(ctx, event, **deferred.value.kwargs) == {"loss": 0.5}
    assert pods_ever(spot_l4) == [event["name"]], pods_ever(spot_l4)
    assert ctx["ti"].xcom["return_value"] == {"loss": 0.5}


@pytest.mark.skipif(not namespaces_available(), reason="the termination-message file needs mount namespaces (root)")
def test_a_deferred_pod_that_succeeded_and_lost_its_node_while_no_trigger_ran_is_read_not_run_again(
    spot_l4: KubernetesEmulator,
) -> None:
    """The soak (seed 463621002): both triggerers were killed in turn, and the trigger ran again on one of them
    30 s later. Meanwhile the shard's pod succeeded and its spot node was reclaimed: PodGC deleted the pod,
    whose end was gone with it when the trigger came back, taken for a reclaim, and the shard ran again.
    The provider's finalizer (``utils.end_hold``) keeps the deleted pod in the API, Succeeded, its log gone
    with the node (404) but its termination message in its status: the trigger that comes back reads the
    success and the result there, and the pod goes once the resumed task is done with it."""
    ctx = context()
    op = profiled(spot_l4, RESULT)
    op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)  # the trigger is not run: its triggerer is down
    name = deferred.value.trigger.pod_name
    core = api(spot_l4)
    pod = wait_for(lambda: (p := core.read_namespaced_pod(name, "default")).status.phase == "Succeeded" and p, 60,
                   "the pod to succeed")  # fmt: skip
    assert END_HOLD in pod.metadata.finalizers
    assert name in spot_l4.remove_node(pod.spec.node_name)  # the reclaim: PodGC deletes the node's pods
    kept = core.read_namespaced_pod(name, "default")
    assert kept.metadata.deletion_timestamp is not None and kept.status.phase == "Succeeded"
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_pod_log(name, "default")
    assert gone.value.status == 404  # the log went with the node

    event = first_event(deferred.value.trigger)
    assert event["status"] == "success" and event[RESULT_LINE_KEY] == '::airflow-gpu-result::{"loss": 0.5}', event
    resumed = profiled(spot_l4, RESULT)
    resumed.deferrable = True
    assert resumed.trigger_reentry(ctx, event, **deferred.value.kwargs) == {"loss": 0.5}
    assert pods_ever(spot_l4) == [name], pods_ever(spot_l4)  # never run again
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    wait_for(lambda: name not in [p.metadata.name for p in core.list_namespaced_pod("default").items], 30,
             "the pod released and gone")  # fmt: skip


def test_a_profiled_pod_drained_while_it_ran_that_exits_0_on_the_sigterm_is_run_again_and_read(
    spot_l4: KubernetesEmulator,
) -> None:
    """A drain evicts the pod once it printed its result; the workload traps SIGTERM and exits 0 on it (a
    checkpoint-and-exit), so its pod ends ``Succeeded`` with the signal in the profiler's end. The operator
    recorded the interruption and then took KPO's success, with no result (the sixth soak showed this path,
    there with a signal the profiler took after the workload's own exit: ``profiling.entrypoint`` no longer
    counts those). An interruption it is: the next pod runs (the drained node cordoned, on another spot L4
    node) and its result is the task's."""
    spot_l4.add_node(NodeSpec("gpu-spot-l4-b", "L4:4", "spot", "g6.24xlarge", {"cpu": "96", "memory": "384Gi"}))
    drained: list[str] = []

    def drain_once_printed() -> None:
        name = wait_for(lambda: next(iter(spot_l4.printed("::airflow-gpu-result::")), None), 60, "a result line")
        drained.append(api(spot_l4).read_namespaced_pod(name, "default").spec.node_name)
        spot_l4.drain(drained[0])

    drainer = threading.Thread(target=drain_once_printed, daemon=True)
    drainer.start()
    script = f"trap 'exit 0' TERM; {RESULT}; sleep 3 & wait"  # the first pod is drained within its 3 s
    ctx = context()
    assert profiled(spot_l4, script).execute(ctx) == {"loss": 0.5}
    drainer.join(60)
    [interruption] = ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY]
    assert interruption["location"] == drained[0] and len(pods_ever(spot_l4)) == 2

"""A twin trigger's ``on_kill`` leaves the ended workload that the resumed task reads (issues 24 and 26).

With two triggerers a trigger can run on both at once for a while (apache/airflow#37180). When one of
the two fires (the workload ended), ``Trigger.submit_event`` moves the task from DEFERRED to SCHEDULED
(then QUEUED, RUNNING on a worker, to read the result) and ``Trigger.clean_unused`` deletes the trigger
row; the other triggerer's supervisor no longer has the trigger assigned, its runner cancels it with
``_USER_ACTION_CANCEL_MSG`` and calls ``on_kill`` (``airflow/jobs/triggerer_job_runner.py``,
``update_triggers``, ``cancel_triggers``, ``run_trigger``; ``airflow/models/trigger.py``). That twin
reads a state that is not ``deferred``, as after Mark Failed: its kill used to delete the ended pod, or
the training Job with its machines, while the resumed task was about to read their logs, result and
profile. Here the twin is cancelled before it fired (its watch had not shown it the end, or it held the
event in the resume dwell) and the supervisor answers the state the resumed task has; the workloads
run in the emulators, so what stays is what the clouds' APIs show afterwards. A copy that fired
``timeout`` or ``error`` with the workload still running marks it as handed to the task
(``triggers.handed_back``), and its twin's kill spares it too; a kill of another trigger row does not.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.batch import GPUBatchJobTrigger
from airflow_gpu.triggers.kubernetes import GPUPodTrigger
from airflow_gpu.triggers.training_job import GPUTrainingJobTrigger
from airflow_gpu.utils.training_job import JOB_LABEL
from tests.triggers import test_batch_trigger as batch_tests
from tests.triggers import test_gpu_pod_trigger as pod_tests
from tests.triggers import test_training_job_trigger as training_tests
from tests.triggers.test_kill_guard import answer, ti

# slow: imports cncf-kubernetes' triggers and async hook (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

#: The states a task passes through once its trigger fired on the other triggerer.
RESUMED = ["scheduled", "queued", "running"]


def twin_kill(twin: Any, first_event: Any, *, seen_end: bool) -> None:
    """Run ``twin`` as the triggerer does, then cancel it and call ``on_kill`` as ``run_trigger`` does on
    a user-action cancel. ``seen_end``: the twin saw the end and holds its event in the resume dwell;
    otherwise it is cancelled before it looked at the workload at all (its triggerer just took it up)."""

    async def body() -> None:
        waiting = asyncio.create_task(first_event(twin))
        if seen_end:
            await asyncio.sleep(2)
        waiting.cancel()
        await twin.on_kill()

    asyncio.run(body())


def pod_kept(api: Any, name: str) -> Any:
    """The pod, still there and not being deleted, once the kill has ended: a delete it sent was served before
    it ended (the API server sets ``deletionTimestamp`` in its answer), so there is nothing to wait for."""
    pod = api.read_namespaced_pod(name, "default")
    assert pod.metadata.deletion_timestamp is None, f"pod {name} is being deleted"
    return pod


@pytest.mark.parametrize("state", RESUMED)
def test_a_twin_pod_trigger_keeps_the_succeeded_pod_the_resumed_task_reads(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    answer(monkeypatch, {"r1": {"train": state}})
    api = pod_tests.core(kubernetes_emulator)
    pod_tests.gpu_pod(api, "twin-done", "echo '::result 42'")
    wait_for(lambda: api.read_namespaced_pod("twin-done", "default").status.phase == "Succeeded", 30, "the pod's end")
    twin = pod_tests.trigger(kubernetes_emulator, "twin-done", termination_grace_period=0)
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, pod_tests.first_event, seen_end=False)

    pod_kept(api, "twin-done")
    assert "::result 42" in api.read_namespaced_pod_log("twin-done", "default", container="base")
    assert kubernetes_emulator.api_requests("DELETE", "pods") == 0


def test_a_twin_pod_trigger_keeps_a_pod_whose_workload_ended_while_its_sidecar_runs(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``do_xcom_push`` the pod stays Running after the workload's end: the XCom sidecar waits for the
    resumed task to read the result, then that task ends it. The base container's end is what counts."""
    answer(monkeypatch, {"r1": {"train": "scheduled"}})
    api = pod_tests.core(kubernetes_emulator)
    sidecar = {"name": "airflow-xcom-sidecar", "image": "busybox", "command": ["sh", "-c", "sleep 600"]}
    pod_tests.gpu_pod(api, "twin-xcom", "", containers=[
        {"name": "base", "image": "busybox", "command": ["sh", "-c", "echo done"]}, sidecar])  # fmt: skip

    def base_ended() -> bool:
        statuses = api.read_namespaced_pod("twin-xcom", "default").status.container_statuses or []
        return any(s.name == "base" and s.state.terminated for s in statuses)

    wait_for(base_ended, 30, "the base container's end")
    twin = pod_tests.trigger(kubernetes_emulator, "twin-xcom", termination_grace_period=0)
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, pod_tests.first_event, seen_end=False)

    assert pod_kept(api, "twin-xcom").status.phase == "Running"
    api.delete_namespaced_pod("twin-xcom", "default", grace_period_seconds=0)


def test_a_twin_spot_pod_trigger_in_its_resume_dwell_keeps_the_succeeded_pod(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Carrying a spot run, the twin deletes every pod of the task try that has not ended, and the pod it
    waits on: that one had ended, and the twin, holding its own event in the resume dwell, had not fired."""
    answer(monkeypatch, {"r1": {"train": "scheduled"}})
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "60")
    api = pod_tests.core(kubernetes_emulator)
    plan = pod_tests.spot_argument("twin-spot", max_interruptions=3)
    pod_tests.first_pod(api, plan, "twin-spot", "echo '::result 7'")
    wait_for(lambda: api.read_namespaced_pod("twin-spot", "default").status.phase == "Succeeded", 30, "the pod's end")
    arguments = pod_tests.trigger(kubernetes_emulator, "twin-spot", termination_grace_period=0).serialize()[1]
    now = datetime.datetime.now(datetime.timezone.utc)
    twin = GPUPodTrigger(**{**arguments, "gpu_spot": plan, "trigger_start_time": now})
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, pod_tests.first_event, seen_end=True)

    pod_kept(api, "twin-spot")
    assert kubernetes_emulator.api_requests("DELETE", "pods") == 0


def test_a_running_pod_is_still_deleted_when_the_task_is_not_deferred(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clear on a deferred task: the state is not ``deferred`` and the workload runs, billed: it goes."""
    answer(monkeypatch, {"r1": {"train": None}})
    api = pod_tests.core(kubernetes_emulator)
    pod_tests.gpu_pod(api, "twin-running", "sleep 600")
    wait_for(lambda: api.read_namespaced_pod("twin-running", "default").status.phase == "Running", 30, "the start")
    twin = pod_tests.trigger(kubernetes_emulator, "twin-running", termination_grace_period=0)
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, pod_tests.first_event, seen_end=False)

    wait_for(lambda: "twin-running" not in pod_tests.pod_names(api), 30, "the pod to go")


def test_a_twin_training_trigger_keeps_the_completed_job_its_service_and_machines(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Job's Foreground delete would take the machines' pods, and the main machine's log, result and
    profile with them."""
    answer(monkeypatch, {"r1": {"train": "queued"}})
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "60")
    import time

    given = training_tests.arguments(
        kubernetes_emulator, "train-twin", 'echo "rank $JOB_COMPLETION_INDEX done"', deferred_at=time.time()
    )
    training_tests.submit(kubernetes_emulator, given)
    api = training_tests.clients(kubernetes_emulator)

    def complete() -> bool:
        job = api["batch"].read_namespaced_job("train-twin", "default")
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

    wait_for(complete, 60, "the Job's completion")
    twin = GPUTrainingJobTrigger(**given)
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, training_tests.final_event, seen_end=True)

    job = api["batch"].read_namespaced_job("train-twin", "default")
    assert job.metadata.deletion_timestamp is None
    assert api["core"].read_namespaced_service("train-twin", "default").metadata.deletion_timestamp is None
    pods = api["core"].list_namespaced_pod("default", label_selector=f"{JOB_LABEL}=train-twin").items
    assert len(pods) == 2 and all(p.metadata.deletion_timestamp is None for p in pods)
    logs = " ".join(str(api["core"].read_namespaced_pod_log(p.metadata.name, "default")) for p in pods)
    assert "rank 0 done" in logs and "rank 1 done" in logs
    assert kubernetes_emulator.api_requests("DELETE") == 0


def test_a_twin_batch_trigger_leaves_the_succeeded_job_as_it_ended(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TerminateJob acts only on a job not yet final (Batch API reference: STARTING or RUNNING are
    terminated, earlier ones cancelled): the twin's TerminateJob on a SUCCEEDED job changes nothing, and
    the resumed task reads the job as it ended."""
    answer(monkeypatch, {"r1": {"train": "running"}})
    emulator = aws_default_connection
    job_id = batch_tests.submit(emulator, ["true"])
    batch = emulator.client("batch")
    wait_for(lambda: batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] == "SUCCEEDED", 60, "the job's end")
    before = batch.describe_jobs(jobs=[job_id])["jobs"][0]
    twin = GPUBatchJobTrigger(job_id, poll_interval=0.2)
    twin.task_instance = ti()  # type: ignore[assignment]

    twin_kill(twin, batch_tests.first_event, seen_end=False)

    after = batch.describe_jobs(jobs=[job_id])["jobs"][0]
    assert after["status"] == "SUCCEEDED" and after.get("statusReason") == before.get("statusReason")
    assert after["container"].get("exitCode") == before["container"].get("exitCode") == 0


def test_a_pod_its_other_copy_handed_back_running_on_a_timeout_is_left_to_the_resumed_task(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One copy fires ``timeout`` (the task's ``execution_timeout``) with the pod running: the resumed task
    reads its log and deletes it (KPO's ``trigger_reentry``; after ``error`` KPO defers on it again). The
    other copy of the same trigger row, killed then, leaves it; a kill of another row (a later deferral's
    trigger, after a Clear) deletes it."""
    import time

    answer(monkeypatch, {"r1": {"train": "scheduled"}})
    api = pod_tests.core(kubernetes_emulator)
    pod_tests.gpu_pod(api, "twin-late", "echo working; sleep 600")
    wait_for(lambda: api.read_namespaced_pod("twin-late", "default").status.phase == "Running", 30, "the start")
    deadline = {"_execution_deadline": int(time.time()) + 2}

    def copy(row: int) -> GPUPodTrigger:
        options = {"trigger_kwargs": deadline} if row == 7 else {}  # 8: a later deferral's trigger
        t = pod_tests.trigger(kubernetes_emulator, "twin-late", termination_grace_period=0, **options)
        t.task_instance, t.trigger_id = ti(), row  # type: ignore[assignment]  # set by the trigger runner
        return t

    event = asyncio.run(asyncio.wait_for(pod_tests.first_event(copy(7)), 30))
    assert event["status"] == "timeout"

    twin_kill(copy(7), pod_tests.first_event, seen_end=False)

    assert pod_kept(api, "twin-late").status.phase == "Running"
    assert kubernetes_emulator.api_requests("DELETE", "pods") == 0

    twin_kill(copy(8), pod_tests.first_event, seen_end=False)

    wait_for(lambda: "twin-late" not in pod_tests.pod_names(api), 30, "the pod to go")


def test_a_training_its_other_copy_handed_to_the_worker_on_an_error_is_not_stopped(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One copy fires ``error`` (here: listing the try's Jobs refused) with the training running: the worker
    watches the Job itself from then on. The other copy of the same row, killed then, leaves the Job and its
    Service; a kill of another row deletes them."""
    answer(monkeypatch, {"r1": {"train": "running"}})
    given = training_tests.arguments(kubernetes_emulator, "train-err", "sleep 600")
    training_tests.submit(kubernetes_emulator, given)
    api = training_tests.clients(kubernetes_emulator)
    training_tests.rank_pod(kubernetes_emulator, "train-err", 1)

    def copy(row: int) -> GPUTrainingJobTrigger:
        t = GPUTrainingJobTrigger(**given)
        t.task_instance, t.trigger_id = ti(), row  # type: ignore[assignment]  # set by the trigger runner
        return t

    refused = kubernetes_emulator.inject_api_fault(verb="list", resource="jobs", status=403, times=1)
    event = asyncio.run(training_tests.final_event(copy(7)))
    assert event["status"] == "error" and refused.hits == 1

    twin_kill(copy(7), training_tests.final_event, seen_end=False)

    assert api["batch"].read_namespaced_job("train-err", "default").metadata.deletion_timestamp is None
    assert api["core"].read_namespaced_service("train-err", "default").metadata.deletion_timestamp is None
    assert kubernetes_emulator.api_requests("DELETE") == 0

    twin_kill(copy(8), training_tests.final_event, seen_end=False)

    wait_for(lambda: not api["batch"].list_namespaced_job("default").items, 30, "the Job to go")
    assert not api["core"].list_namespaced_service("default", label_selector=JOB_LABEL).items


def test_the_mark_is_written_under_the_shipped_role(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The triggerer runs as the tasks' account (docs/permissions): ``patch`` on pods lets it mark the pod."""
    import time

    import yaml
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger
    from kubernetes import client

    from airflow_gpu.triggers.handed_back import ANNOTATION
    from airflow_gpu.triggers.pod_watch import WATCH_LABEL
    from tests.operators.test_kubernetes_permissions import NAMESPACE, TASKS, admin, worker_kubeconfig

    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS)
    core = client.CoreV1Api(admin(kubernetes_emulator))
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", "sleep 600"]}
    core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": "late", "labels": {WATCH_LABEL: "l4"}},
                                           "spec": {"restartPolicy": "Never", "containers": [container]}})  # fmt: skip
    wait_for(lambda: core.read_namespaced_pod("late", NAMESPACE).status.phase == "Running", 30, "the start")
    official = KubernetesPodTrigger(
        pod_name="late", pod_namespace=NAMESPACE, trigger_start_time=None,  # type: ignore[arg-type]
        kubernetes_conn_id=None, config_dict=yaml.safe_load(kubeconfig.read_text()), poll_interval=2,
        base_container_name="base", trigger_kwargs={"_execution_deadline": int(time.time()) + 2},
    )  # fmt: skip
    t = GPUPodTrigger.from_official(official)
    t.trigger_id = 41  # type: ignore[assignment]  # set by the trigger runner

    event = asyncio.run(asyncio.wait_for(pod_tests.first_event(t), 30))

    assert event["status"] == "timeout"
    assert core.read_namespaced_pod("late", NAMESPACE).metadata.annotations[ANNOTATION] == "41"


def test_a_mark_the_api_server_refuses_does_not_hold_the_event(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``error`` event may come from an API server in trouble: the mark's retries are bounded
    (``MARK_SECONDS``, 1 s here), not the minutes other calls ride out, and the event goes without it."""
    import time

    from airflow_gpu.triggers import handed_back

    monkeypatch.setattr(handed_back, "MARK_SECONDS", 1.0)
    api = pod_tests.core(kubernetes_emulator)
    pod_tests.gpu_pod(api, "unmarked", "sleep 600")
    wait_for(lambda: api.read_namespaced_pod("unmarked", "default").status.phase == "Running", 30, "the start")
    t = pod_tests.trigger(kubernetes_emulator, "unmarked", termination_grace_period=0,
                          trigger_kwargs={"_execution_deadline": int(time.time()) + 1})  # fmt: skip
    t.trigger_id = 5  # type: ignore[assignment]  # set by the trigger runner
    refused = kubernetes_emulator.inject_api_fault(verb="patch", resource="pods", status=503, times=None)
    try:
        event = asyncio.run(asyncio.wait_for(pod_tests.first_event(t), 20))
    finally:
        kubernetes_emulator.clear_api_faults()
    assert event["status"] == "timeout" and refused.hits >= 1
    assert not (api.read_namespaced_pod("unmarked", "default").metadata.annotations or {}).get(handed_back.ANNOTATION)
    assert "Could not mark pod default/unmarked" in capsys.readouterr().out
    api.delete_namespaced_pod("unmarked", "default", grace_period_seconds=0)

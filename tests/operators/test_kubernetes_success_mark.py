"""A try that read its pod's success and whose worker died before the task did (``operators/success_mark.py``).

The soak's defect (seed 9): the sync try read the pod's result, KPO deleted the pod, and the worker was
SIGKILLed before the task instance became ``success``; the retry found no pod to take over and trained
again. The worker's death is played here by ``_succeed`` raising ``SystemExit`` (nothing after the pod's
cleanup runs, as in a killed process); ``Ti`` and ``Store`` stand in for Airflow's task instance and task
state store (tests/operators/task_context.py), the pods run on the Kubernetes emulator over HTTP.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.operators.orphaned_try import TAKEN_ANNOTATION
from airflow_gpu.operators.success_mark import READ_ANNOTATION, SUCCESS_KEY
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.end_hold import END_HOLD
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from tests.operators.task_context import Store, Ti

pytestmark = pytest.mark.slow

RESULT = "echo '::airflow-gpu-result::{\"loss\": 0.5}'"


def operator(emulator: KubernetesEmulator, script: str = RESULT, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", capacity="on-demand", cmds=["sh", "-c", script],
        gpu_profile=False, namespace="default", kubernetes_conn_id=None,
        config_file=str(emulator.kubeconfig_path), startup_check_interval_seconds=1, **kwargs,
    )  # fmt: skip


def context(store: Store, try_number: int, max_tries: int = 2, retries: int = 2, clear_number: int = 0) -> Any:
    """Airflow's context as far as the record reads it: the task instance's ``max_tries``, its task's
    ``retries`` and the DAG run's ``clear_number``."""
    ti = Ti(try_number=try_number, max_tries=max_tries)
    ti.task = SimpleNamespace(retries=retries)  # type: ignore[attr-defined]
    dag_run = SimpleNamespace(clear_number=clear_number)
    return {"ti": ti, "run_id": "manual__1", "dag": None, "dag_run": dag_run, "task_state_store": store}


def pods_ever(emulator: KubernetesEmulator) -> int:
    return len(emulator.pod_phase_times("default"))


def died_after_reading(emulator: KubernetesEmulator, store: Store, script: str = RESULT) -> None:
    """Try 1: its pod succeeds and is read and deleted, then its worker dies before the task ends."""
    first = operator(emulator, script)

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    first._succeed = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.execute(context(store, 1))
    assert pods_ever(emulator) == 1
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))
    assert core.list_namespaced_pod("default").items == []  # KPO deleted the pod it read: nothing to take over


def test_a_retry_takes_over_the_success_a_killed_try_had_read(kubernetes_emulator: KubernetesEmulator) -> None:
    store = Store()
    died_after_reading(kubernetes_emulator, store)
    assert store[SUCCESS_KEY]["result"] == {"loss": 0.5} and store[SUCCESS_KEY]["try_number"] == 1
    retry = context(store, 2)
    assert operator(kubernetes_emulator).execute(retry) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1  # not run again
    assert retry["ti"].xcom["return_value"] == {"loss": 0.5}
    assert retry["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []


@pytest.mark.parametrize(
    "clearing",
    [
        {"max_tries": 1 + 2, "clear_number": 1},  # a Clear: max_tries = try_number + retries, the run's count
        {"max_tries": 1 + 1, "retries": 1, "clear_number": 1},  # retries lowered: max_tries comes out the same
    ],
)
def test_a_clear_after_the_success_runs_the_workload_again(
    kubernetes_emulator: KubernetesEmulator, clearing: dict[str, int]
) -> None:
    """A user who clears the task asks for a new run, whichever of what a Clear changes tells it."""
    store = Store()
    died_after_reading(kubernetes_emulator, store)
    cleared = context(store, 2, **clearing)
    assert operator(kubernetes_emulator).execute(cleared) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 2
    assert store[SUCCESS_KEY]["try_number"] == 2 and store[SUCCESS_KEY]["max_tries"] == clearing["max_tries"]


def test_a_clear_of_another_task_of_the_run_leaves_the_success_to_the_retry(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The twelfth soak (seed 831782228): a person cleared shard 34 of a fan-out while shards 29 and 30, whose
    workers had died after reading their success, waited for their retries; the run's ``clear_number`` rose
    and both ran their workloads again. It rises for a Clear of any task of the run, so it no longer counts
    (the same numbers are what a Clear of this task while Airflow still had it running leaves: taken over too,
    see ``success_mark``)."""
    store = Store()
    died_after_reading(kubernetes_emulator, store)
    assert operator(kubernetes_emulator).execute(context(store, 2, clear_number=1)) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1  # not run again


def test_a_result_that_is_not_json_is_not_recorded(kubernetes_emulator: KubernetesEmulator) -> None:
    """Its try fails (a bug in the workload); a retry runs it again, as before."""
    store = Store()
    op = operator(kubernetes_emulator, "echo '::airflow-gpu-result::{not json'")
    with pytest.raises(Exception, match="not JSON"):
        op.execute(context(store, 1))
    assert SUCCESS_KEY not in store


def test_with_durable_off_each_try_runs_its_own_pod(kubernetes_emulator: KubernetesEmulator) -> None:
    """``durable=False`` (KPO's ``reattach_on_restart``): the user asked each try for a pod of its own."""
    store = Store()
    died_after_reading(kubernetes_emulator, store)
    assert operator(kubernetes_emulator, durable=False).execute(context(store, 2)) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 2


def test_a_try_whose_supervisor_died_leaves_its_running_pod_to_the_retry(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak (seed 9): worker-2's supervisor was SIGKILLed while its task waited on a running pod; the task
    process lived on, its next log line failed (a broken pipe), and KPO's cleanup labelled the running pod
    ``already_checked`` on the way out, so the retry made a second pod. The supervisor's death is played by
    the recorded parent pid changing and the log follow (where the log line is written) raising
    ``BrokenPipeError`` while the pod runs, which runs until the test lets it end. The orphan stays to watch
    the pod (``orphaned_try.linger``) and leaves once the retry has taken it over, long before its patience."""
    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "600")
    store, hold = Store(), tmp_path / "release"
    held = f"until [ -e {hold} ]; do sleep 0.1; done; {RESULT}"
    first = operator(kubernetes_emulator, held)

    def orphaned(pod: Any, *args: Any, **kwargs: Any) -> Any:
        first._supervisor = -1  # type: ignore[attr-defined]  # another parent now: the supervisor is gone
        raise BrokenPipeError(32, "Broken pipe")

    first.pod_manager.fetch_requested_container_logs = orphaned  # type: ignore[method-assign]
    raised: list[BaseException] = []
    orphan = threading.Thread(target=lambda: _catch(raised, lambda: first.execute(context(store, 1))))
    orphan.start()
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    wait_for(lambda: getattr(first, "_supervisor", None) == -1, 60, "the try to lose its supervisor")
    (pod,) = core.list_namespaced_pod("default").items
    assert "already_checked" not in (pod.metadata.labels or {}) and pod.metadata.deletion_timestamp is None
    assert pod.status.phase == "Running"  # left running, for the retry
    retry = operator(kubernetes_emulator, held)
    result: list[Any] = []
    taking = threading.Thread(target=lambda: result.append(retry.execute(context(store, 2))))
    taking.start()  # the retry reattaches and marks the pod; the orphan sees the mark and leaves
    orphan.join(120)
    assert not orphan.is_alive() and isinstance(raised[0], BrokenPipeError)
    (pod,) = core.list_namespaced_pod("default").items
    assert pod.metadata.annotations[TAKEN_ANNOTATION] == retry._taker  # type: ignore[attr-defined]
    hold.touch()
    taking.join(120)
    assert result == [{"loss": 0.5}]
    assert pods_ever(kubernetes_emulator) == 1  # the retry reattached to it: the workload ran once


@pytest.mark.parametrize("started", [False, True], ids=["pending", "running"])
def test_an_orphan_whose_pod_no_retry_takes_over_deletes_it_after_its_patience_unless_it_runs(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, started: bool
) -> None:
    """The fourth soak's live orphan: the worker died, then a person marked the task success, so Airflow made
    no retry. The orphan left its pod for a retry that never came; past its patience it deletes the pod that
    never started (here still pulling its image), and leaves one that runs to ``airflow-gpu reap``, which asks
    Airflow first (a retry only late must not lose the work). The supervisor dies at the first read of the
    pod after its create (``RetryingPodManager``'s stop callback, which every wait asks)."""
    from airflow_gpu.operators.orphaned_try import OrphanedTry

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "1")
    if not started:
        kubernetes_emulator.slow_pulls(120)
    store = Store()
    first = operator(kubernetes_emulator, "sleep 300; " + RESULT)
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    stop = first.pod_manager._stop
    assert stop is not None

    def dies_once_the_pod_is_where_the_case_wants_it() -> None:
        pods = core.list_namespaced_pod("default").items
        if pods and (pods[0].status.phase == "Running") == started:
            first._supervisor = -1  # type: ignore[attr-defined]  # another parent now: the supervisor is gone
        stop()

    first.pod_manager._stop = dies_once_the_pod_is_where_the_case_wants_it
    with pytest.raises(OrphanedTry):
        first.execute(context(store, 1))  # a try is left (max_tries 2): the pod was left to one, watched
    assert pods_ever(kubernetes_emulator) == 1
    if not started:
        wait_for(lambda: not core.list_namespaced_pod("default").items, 60, "the pod gone")  # held: released too
        return
    (pod,) = core.list_namespaced_pod("default").items
    assert pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None  # the reaper's to judge
    core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)


def _catch(into: list[BaseException], call: Any) -> None:
    try:
        call()
    except BaseException as error:
        into.append(error)


def test_an_orphaned_last_try_deletes_its_pod_rather_than_leave_it_running(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """No retry will take the pod over (this is the task's last try): it is deleted, not left billed for nobody."""
    store = Store()
    last = operator(kubernetes_emulator, "sleep 30; " + RESULT)

    def orphaned(pod: Any, *args: Any, **kwargs: Any) -> Any:
        last._supervisor = -1  # type: ignore[attr-defined]
        raise BrokenPipeError(32, "Broken pipe")

    last.pod_manager.fetch_requested_container_logs = orphaned  # type: ignore[method-assign]
    with pytest.raises(BrokenPipeError):
        last.execute(context(store, 1, max_tries=0))
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    pods = core.list_namespaced_pod("default").items
    assert pods_ever(kubernetes_emulator) == 1  # the pod was made, and while it ran:
    assert all(p.metadata.deletion_timestamp is not None for p in pods), pods  # deleted, or being deleted


def test_a_pod_that_succeeds_while_the_retry_looks_for_it_is_read_not_run_again(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry looks for an earlier try's unread success first (``succeeded_unread``) and finds the pod
    Running; the pod succeeds before KPO's reattach finds it, and KPO deleted such an ended pod and made
    another: the workload ran twice (seen here under load, one run in three). The reattach now keeps it and
    reads it (``UnreadSuccessKept``). The pod's success is forced between the two looks."""
    from airflow_gpu.operators import kubernetes

    store, hold = Store(), tmp_path / "release"
    held = f"until [ -e {hold} ]; do sleep 0.1; done; {RESULT}"
    first = operator(kubernetes_emulator, held)

    def orphaned(pod: Any, *args: Any, **kwargs: Any) -> Any:
        first._supervisor = -1  # type: ignore[attr-defined]
        raise BrokenPipeError(32, "Broken pipe")

    first.pod_manager.fetch_requested_container_logs = orphaned  # type: ignore[method-assign]
    raised: list[BaseException] = []  # the orphan watches the pod it left until the pod ends
    orphan = threading.Thread(target=lambda: _catch(raised, lambda: first.execute(context(store, 1))))
    orphan.start()
    wait_for(lambda: getattr(first, "_supervisor", None) == -1, 60, "the try to lose its supervisor")
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    real = kubernetes.succeeded_unread

    def succeeds_right_after_the_look(op: Any, ctx: Any) -> Any:
        found = real(op, ctx)  # None: the pod still runs
        hold.touch()
        wait_for(lambda: core.list_namespaced_pod("default").items[0].status.phase == "Succeeded", 60, "success")
        return found

    monkeypatch.setattr(kubernetes, "succeeded_unread", succeeds_right_after_the_look)
    retry = context(store, 2)
    assert operator(kubernetes_emulator, held).execute(retry) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1  # read, not run again
    orphan.join(120)
    assert not orphan.is_alive() and isinstance(raised[0], BrokenPipeError)


def test_a_retry_that_takes_over_a_recorded_success_lets_go_of_the_pod_the_dead_try_left(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """Try 1 recorded its pod's success and died before KPO's cleanup deleted the pod: the pod stays, with the
    provider's finalizer (``utils.end_hold``). The retry that takes the success over deletes it, as that
    cleanup would have, and lets it go; before, it stayed, and a deletion of it waited for the reaper."""
    store = Store()
    first = operator(kubernetes_emulator)

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    first.process_pod_deletion = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.execute(context(store, 1))
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    [left] = core.list_namespaced_pod("default").items
    assert left.metadata.finalizers == [END_HOLD] and store[SUCCESS_KEY]["try_number"] == 1
    assert operator(kubernetes_emulator).execute(context(store, 2)) == {"loss": 0.5}
    wait_for(lambda: core.list_namespaced_pod("default").items == [], 30, "the pod deleted and let go of")
    assert pods_ever(kubernetes_emulator) == 1


def test_keep_until_read_off_makes_pods_as_kpo_does(kubernetes_emulator: KubernetesEmulator) -> None:
    context_: Any = {"ti": Ti(), "run_id": "manual__1", "dag": None}
    held = operator(kubernetes_emulator).build_pod_request_obj(context_, dry_run=True)
    plain = operator(kubernetes_emulator, keep_until_read=False).build_pod_request_obj(context_, dry_run=True)
    assert held.metadata.finalizers == [END_HOLD] and not plain.metadata.finalizers


def test_a_deferred_try_that_read_its_pod_s_success_and_died_is_taken_over_not_run_again(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The fourth and fifth soaks: a deferred shard's resume read its pod's success and KPO deleted the pod; its
    worker was killed a moment later, before the task ended; the retry ran the shard again. The resume records
    the success as the sync path does (``success_mark.record_pod`` in ``cleanup``) and the retry takes it over."""
    from airflow.sdk.exceptions import TaskDeferred

    from tests.operators.test_kubernetes_drained_after_success import first_event

    store = Store()
    first_try = context(store, 1)
    with pytest.raises(TaskDeferred) as deferred:
        operator(kubernetes_emulator, deferrable=True).execute(first_try)
    event = first_event(deferred.value.trigger)
    assert event["status"] == "success", event
    resumed = operator(kubernetes_emulator, deferrable=True)

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    resumed._succeed = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        resumed.trigger_reentry(first_try, event, **deferred.value.kwargs)
    assert store[SUCCESS_KEY]["result"] == {"loss": 0.5}
    assert operator(kubernetes_emulator, deferrable=True).execute(context(store, 2)) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1


class ClosedPipe(Store):
    """The task state store of a try whose supervisor is being killed: the record's request fails as the SDK's
    comms fail on a closed pipe (``EOFError``); the other keys (KPO's pod identity) were written before."""

    def set(self, key: str, value: Any) -> None:
        if key == SUCCESS_KEY:
            raise EOFError("Request socket closed before length")
        super().set(key, value)


def died_unrecorded(emulator: KubernetesEmulator, store: Store, **kwargs: Any) -> client.V1Pod:
    """Try 1 reads its pod's success, cannot record it, and dies before the task ends; the pod left behind."""
    first = operator(emulator, **kwargs)

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    first._succeed = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.execute(context(store, 1))
    assert SUCCESS_KEY not in store
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))
    [kept] = core.list_namespaced_pod("default").items
    return kept


def test_a_success_that_could_not_be_recorded_keeps_its_pod_and_the_retry_takes_it_over(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The twenty-fourth soak (seed 1786873327, shard 44): a worker was killed while its try wrote the success
    record; the write failed on the closed pipe before the task process was reparented (the kernel closes a
    dying process's files before it hands its children on), so the try did not see itself orphaned yet, KPO
    deleted the pod, and the retry found neither record nor pod and ran the shard again. The supervisor's
    death is played by the store's ``EOFError`` with the parent unchanged, and ``_succeed`` raising
    ``SystemExit``. The pod is kept, held, unmarked, with the reading try's clearing on it; the retry reads
    it instead of running the workload again, then deletes it and lets it go."""
    store = ClosedPipe()
    kept = died_unrecorded(kubernetes_emulator, store)
    assert kept.status.phase == "Succeeded" and kept.metadata.deletion_timestamp is None
    assert kept.metadata.finalizers == [END_HOLD] and "already_checked" not in (kept.metadata.labels or {})
    assert json.loads(kept.metadata.annotations[READ_ANNOTATION]) == {"try_number": 1, "max_tries": 2, "retries": 2}
    retry = context(Store(store), 2)
    assert operator(kubernetes_emulator).execute(retry) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1  # not run again
    assert retry["ti"].xcom["return_value"] == {"loss": 0.5}
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    wait_for(lambda: core.list_namespaced_pod("default").items == [], 30, "the pod deleted and let go of")


@pytest.mark.parametrize("on_finish_action", ["delete_pod", "keep_pod", "delete_active_pod"])
def test_a_clear_after_an_unrecorded_success_runs_the_workload_again(
    kubernetes_emulator: KubernetesEmulator, on_finish_action: str
) -> None:
    """The kept pod is no success for a Clear's try (``max_tries = try_number + retries``): KPO's reattach
    finds it (by the identity in the store), and it is set aside, labelled checked and let go of (deleted
    unless the user keeps pods, as KPO would), and a new pod runs the workload, as after a recorded success.
    Kept pods (``keep_pod``, ``delete_active_pod``) were returned to KPO's reattach and read as the new try's."""
    store = ClosedPipe()
    died_unrecorded(kubernetes_emulator, store, on_finish_action=on_finish_action)
    cleared = context(Store(store), 2, max_tries=1 + 2)
    assert operator(kubernetes_emulator, on_finish_action=on_finish_action).execute(cleared) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 2
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    if on_finish_action == "delete_pod":
        wait_for(lambda: core.list_namespaced_pod("default").items == [], 30, "every pod deleted and let go of")
        return
    pods = core.list_namespaced_pod("default").items
    assert len(pods) == 2 and all(pod.metadata.labels.get("already_checked") == "True" for pod in pods)
    assert all(not pod.metadata.finalizers for pod in pods)  # kept as asked, let go of


class FailsOnce(Store):
    """A store whose first write of the record fails (the api-server down past the retries), then works."""

    failed = False

    def set(self, key: str, value: Any) -> None:
        if key == SUCCESS_KEY and not self.failed:
            self.failed = True
            raise RuntimeError("API_SERVER_ERROR 503")
        super().set(key, value)


@pytest.mark.parametrize("on_finish_action", ["delete_pod", "keep_pod"])
def test_a_try_that_lives_on_records_the_success_again_and_cleans_up_its_pod(
    kubernetes_emulator: KubernetesEmulator, on_finish_action: str
) -> None:
    """The first write failed, the try lives on: before it succeeds it records the success again and then ends
    the pod as KPO's cleanup would have (deleted; or labelled checked and let go of where pods are kept), so
    nothing waits on ``airflow-gpu reap`` and no Clear takes the kept pod for an unread success."""
    store = FailsOnce()
    op = operator(kubernetes_emulator, on_finish_action=on_finish_action)
    assert op.execute(context(store, 1)) == {"loss": 0.5}
    assert store.failed and store[SUCCESS_KEY]["try_number"] == 1
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    if on_finish_action == "delete_pod":
        wait_for(lambda: core.list_namespaced_pod("default").items == [], 30, "the pod deleted and let go of")
        return
    [pod] = core.list_namespaced_pod("default").items
    assert pod.metadata.labels.get("already_checked") == "True" and not pod.metadata.finalizers


def test_on_the_last_try_an_unrecorded_success_cleans_up_as_before(kubernetes_emulator: KubernetesEmulator) -> None:
    """No retry would take the pod over (``max_tries`` reached): it is not kept, KPO deletes it."""
    store = ClosedPipe()
    last = context(store, 3, max_tries=2)
    assert operator(kubernetes_emulator).execute(last) == {"loss": 0.5}
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    wait_for(lambda: core.list_namespaced_pod("default").items == [], 30, "the pod deleted and let go of")


def test_a_recorded_success_taken_over_where_pods_are_kept_is_labelled_checked_and_a_clear_runs_again(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """``on_finish_action="keep_pod"``: try 1 recorded its success and died before KPO's cleanup labelled the
    pod checked. The retry that takes the record over labels it, as that cleanup would have; unlabelled, a
    later Clear's try took the kept pod for a success no try read and returned its old result."""
    store = Store()
    first = operator(kubernetes_emulator, on_finish_action="keep_pod")

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    first.patch_already_checked = killed  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.execute(context(store, 1))
    assert store[SUCCESS_KEY]["try_number"] == 1
    assert operator(kubernetes_emulator, on_finish_action="keep_pod").execute(context(store, 2)) == {"loss": 0.5}
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    [pod] = core.list_namespaced_pod("default").items
    assert pod.metadata.labels.get("already_checked") == "True" and not pod.metadata.finalizers
    cleared = context(store, 3, max_tries=2 + 2)
    assert operator(kubernetes_emulator, on_finish_action="keep_pod").execute(cleared) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 2  # run again

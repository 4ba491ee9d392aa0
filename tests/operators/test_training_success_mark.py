"""A two-machine Kubernetes training whose try read the Job's success and whose worker died before the task
did (``operators/training_success.py``, issue 26; the nineteenth soak, seed 795738838).

The try judges the ended Job, reads the main machine's result, deletes the Job and closes its saved run;
the task instance becomes ``success`` only once ``execute`` (or the resume) has returned. A worker killed
in between left no Job and a closed run, so the retry created a new Job: the training ran twice. The
worker's death is played by ``SystemExit`` raised where the try is killed, with the try's own exception
handling (``_after_error``) switched off for it, so that nothing of the try runs after it, as in a killed
process: before the Job is deleted, while closing the run, or once it is closed. ``Ti`` and ``Store``
stand in for Airflow's task instance and task state store (tests/operators/task_context.py; the store
here keeps JSON copies, as Airflow's does); the Jobs run on the Kubernetes emulator over HTTP, their
machines simulated containers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu.operators import accelerate_kubernetes
from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD, STATE_STORE_KEY, IndexedJobTraining
from airflow_gpu.operators.success_mark import SUCCESS_KEY
from airflow_gpu.operators.training_job_cluster import TrainingJobs
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.kubernetes_history import JobHistory
from tests.operators.task_context import Store, Ti
from tests.operators.test_training_job_runs import apis, jobs, training

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]


def context(store: Store, try_number: int, max_tries: int = 2, retries: int = 2) -> dict[str, Any]:
    """Airflow's context as far as the training and the record read it: identity, ``max_tries`` and the task's
    ``retries`` (what a Clear changes and a retry does not)."""
    ti = Ti(try_number, dag_id="training_dag", run_id="manual__1", max_tries=max_tries)
    ti.task = SimpleNamespace(retries=retries)  # type: ignore[attr-defined]
    return {"ti": ti, "run_id": "manual__1", "dag": None, "task_state_store": store}


class JsonStore(Store):
    """Airflow's task state store keeps JSON, not the objects handed to it."""

    def set(self, key: str, value: Any) -> None:
        self[key] = json.loads(json.dumps(value))


def killed_after_reading(store: Store, at: str, finish: Callable[[], Any]) -> None:
    """Try 1 (``finish``) reads its success and its worker dies: before its Job's deletion is asked
    (``delete``), while closing the run (``close``: the deletion asked, the run still open) or right after
    (``closed``). No reclaim comes in these runs: the run is closed once, at the success."""
    real_save, real_delete = accelerate_kubernetes.save_run, TrainingJobs.delete

    def save_run(ctx: Any, key: str, run: Any, open_: bool = True) -> None:
        if not open_ and at == "close":
            raise SystemExit(-9)
        real_save(ctx, key, run, open_=open_)
        if not open_ and at == "closed":
            raise SystemExit(-9)

    def delete(jobs: TrainingJobs, *args: Any, **kwargs: Any) -> None:
        if at == "delete" and SUCCESS_KEY in store:
            raise SystemExit(-9)
        real_delete(jobs, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patched, pytest.raises(SystemExit):
        patched.setattr(accelerate_kubernetes, "save_run", save_run)
        patched.setattr(TrainingJobs, "delete", delete)
        patched.setattr(IndexedJobTraining, "_after_error", lambda *_: None)  # a killed process runs nothing
        finish()


def deleted(emulator: KubernetesEmulator) -> None:
    """The Jobs and Services the try asked to delete are gone (Foreground: once their machines are)."""
    from airflow_gpu.testing.polling import wait_for
    from airflow_gpu.utils.training_job import JOB_LABEL

    core = apis(emulator)[1]
    wait_for(lambda: not jobs(emulator), 60, "the Jobs gone")
    assert not core.list_namespaced_service("default", label_selector=JOB_LABEL).items


@pytest.mark.parametrize("at", ["delete", "close", "closed"])
def test_a_retry_takes_over_the_training_a_killed_try_had_read(
    kubernetes_default_connection: KubernetesEmulator, at: str
) -> None:
    """Try 2 ends with try 1's result, its interruptions and where it ran; no second Job over the whole run.
    Before, it created one: the training ran twice."""
    emulator, store = kubernetes_default_connection, JsonStore()
    with JobHistory(emulator) as history:
        killed_after_reading(store, at, lambda: training(seconds=1).execute(context(store, 1)))  # type: ignore[arg-type]
        assert store[STATE_STORE_KEY]["open"] is (at != "closed")  # open or closed: the record decides
        retry = context(store, 2)
        assert training(seconds=1).execute(retry) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert len(history.created()) == 1  # trained once
    mark = store[SUCCESS_KEY]
    assert history.created() == [mark["workload"]]
    assert (mark["backend"], mark["result"], mark["try_number"]) == ("training", {"loss": 0.25}, 1)
    assert retry["ti"].xcom["gpu_interruptions"] == []
    assert retry["ti"].xcom["gpu_accelerator"]["location"] == mark["location"]
    assert store[STATE_STORE_KEY]["open"] is False  # judged: no later try takes a Job over


def test_a_deferred_training_whose_worker_died_after_its_resume_read_the_success(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The soak's case: the trigger saw the Job complete, the resume read it and its worker was killed; the
    retry, not deferred, takes the result over and creates nothing."""
    from airflow.sdk.exceptions import TaskDeferred

    emulator, store = kubernetes_default_connection, JsonStore()
    with JobHistory(emulator) as history:
        with pytest.raises(TaskDeferred) as deferred:
            training(seconds=1, deferrable=True).execute(context(store, 1))  # type: ignore[arg-type]

        async def event() -> dict[str, Any]:
            async for fired in deferred.value.trigger.run():
                return dict(fired.payload)
            raise AssertionError("no event")

        payload = asyncio.run(asyncio.wait_for(event(), 90))
        resumed = training(seconds=1, deferrable=True)  # the worker the triggerer hands the task back to
        killed_after_reading(
            store,
            "closed",
            lambda: resumed.resume_execution(RESUME_METHOD, {"event": payload}, context(store, 1)),  # type: ignore[arg-type]
        )
        retry = context(store, 2)
        assert training(seconds=1, deferrable=True).execute(retry) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert history.created() == [payload["job"]]  # trained once
    xcom = retry["ti"].xcom
    assert xcom["gpu_interruptions"] == [] and xcom["gpu_accelerator"]["location"] == store[SUCCESS_KEY]["location"]


def test_a_success_without_a_result_line_hands_over_none_and_the_reason(
    kubernetes_default_connection: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry returns None, as that try would have, and warns that the training printed no result line, not
    that its log went with the dead try; a listing of the task's Jobs that fails does not fail the success."""
    emulator, store = kubernetes_default_connection, JsonStore()
    first = training(seconds=1)
    first.env["SIMULATED_OUTPUT"] = "training done"
    with JobHistory(emulator) as history:
        killed_after_reading(store, "closed", lambda: first.execute(context(store, 1)))  # type: ignore[arg-type]
        retry = training(seconds=1)

        def down(*_: Any) -> Any:
            raise OSError("the API server is down")

        monkeypatch.setattr(TrainingJobs, "of_task", down)
        assert retry.execute(context(store, 2)) is None  # type: ignore[arg-type]
        deleted(emulator)  # the recorded Job, by its name
    assert len(history.created()) == 1
    missing = retry._runner.op.result_missing("the training")
    assert missing is not None and "printed no ::airflow-gpu-result:: line" in missing


def test_a_pods_record_is_not_a_trainings(kubernetes_default_connection: KubernetesEmulator) -> None:
    """The key is shared with pods (a single-machine training's, say): a record of another backend is never taken."""
    emulator, store = kubernetes_default_connection, JsonStore()
    store[SUCCESS_KEY] = {"try_number": 1, "max_tries": 2, "retries": 2, "backend": "kubernetes", "workload": "train-x",
                          "location": None, "result": {"loss": 9.0}, "run": {}}  # fmt: skip
    with JobHistory(emulator) as history:
        assert training(seconds=1).execute(context(store, 2)) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert len(history.created()) == 1


@pytest.mark.parametrize("clearing", [{"max_tries": 3}, {"retries": 1}])
def test_a_clear_after_the_success_trains_again(
    kubernetes_default_connection: KubernetesEmulator, clearing: dict[str, int]
) -> None:
    """A user who clears a task whose try read its success asks for a new training: the record is not taken."""
    emulator, store = kubernetes_default_connection, JsonStore()
    with JobHistory(emulator) as history:
        killed_after_reading(store, "closed", lambda: training(seconds=1).execute(context(store, 1)))  # type: ignore[arg-type]
        assert training(seconds=1).execute(context(store, 2, **clearing)) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert len(history.created()) == 2


def test_a_result_that_is_not_json_is_not_recorded(kubernetes_default_connection: KubernetesEmulator) -> None:
    """That try fails (the training's bug), its Job deleted; nothing is recorded for a retry to take over."""
    from airflow.sdk.exceptions import AirflowFailException

    store = JsonStore()
    op = training(seconds=1)
    op.env["SIMULATED_OUTPUT"] = "training\n::airflow-gpu-result::{not json"
    with pytest.raises(AirflowFailException):
        op.execute(context(store, 1))  # type: ignore[arg-type]
    assert SUCCESS_KEY not in store
    deleted(kubernetes_default_connection)


def test_reattach_off_trains_again(kubernetes_default_connection: KubernetesEmulator) -> None:
    """``reattach_on_restart=False`` (KPO's argument, ``durable=False`` here) means every try runs its own
    workload, as for a pod: the record is not taken."""
    emulator, store = kubernetes_default_connection, JsonStore()
    with JobHistory(emulator) as history:
        killed_after_reading(store, "closed", lambda: training(seconds=1).execute(context(store, 1)))  # type: ignore[arg-type]
        assert training(seconds=1, durable=False).execute(context(store, 2)) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert len(history.created()) == 2


class ClosedPipe(JsonStore):
    """The store of a try whose supervisor is being killed (the twenty-fourth soak's pod case, here for a Job):
    the record's request and the run's closing fail as the SDK's comms fail on a closed pipe (``EOFError``);
    with ``closes``, only the record fails (an api-server error past the retries), and the closing goes through."""

    def __init__(self, closes: bool = False) -> None:
        super().__init__()
        self.closes = closes

    def set(self, key: str, value: Any) -> None:
        closing = key == STATE_STORE_KEY and not value.get("open") and not self.closes
        if key == SUCCESS_KEY or closing:
            raise EOFError("Request socket closed before length")
        super().set(key, value)


def test_a_training_success_that_could_not_be_recorded_keeps_its_job_for_the_retry(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The try cannot record the success, nor close its run, and its process is not yet seen orphaned (the
    kernel closes a dying supervisor's pipe before it reparents its children): its own error handling
    (``_after_error``, run for real here) leaves the complete Job, and the retry takes it over. Before, the Job
    was deleted ahead of the run's closing, and the retry trained again."""
    emulator, store = kubernetes_default_connection, ClosedPipe()
    with JobHistory(emulator) as history:
        with pytest.raises(EOFError):
            training(seconds=1).execute(context(store, 1))  # type: ignore[arg-type]
        assert SUCCESS_KEY not in store and store[STATE_STORE_KEY]["open"] is True
        assert len(jobs(emulator)) == 1  # kept
        retry = context(JsonStore(store), 2)
        assert training(seconds=1).execute(retry) == {"loss": 0.25}  # type: ignore[arg-type]
        deleted(emulator)
    assert len(history.created()) == 1  # trained once


def test_a_training_success_unrecorded_but_closed_deletes_its_job_as_before(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The record failed and the closing went through: the try lives, judged its Job, and deletes it."""
    emulator, store = kubernetes_default_connection, ClosedPipe(closes=True)
    assert training(seconds=1).execute(context(store, 1)) == {"loss": 0.25}  # type: ignore[arg-type]
    assert SUCCESS_KEY not in store and store[STATE_STORE_KEY]["open"] is False
    deleted(emulator)


def test_on_the_last_try_an_unrecorded_training_success_deletes_its_job(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """No retry would take the Job over (``max_tries`` reached): it is deleted as before, whatever the store."""
    emulator, store = kubernetes_default_connection, ClosedPipe()
    with pytest.raises(EOFError):
        training(seconds=1).execute(context(store, 3, max_tries=2))  # type: ignore[arg-type]
    deleted(emulator)

"""A ``GPUBatchOperator`` try that read its job's success and whose worker died before the task did
(``operators/success_mark.py``, issue 26).

The window the soak found for pods (seed 9) is there for Batch jobs too: the try judges the ended job,
reads its result and closes its saved run, and the task instance becomes ``success`` only once
``execute`` has returned. A worker killed in between left a closed run, which a retry does not take
over (a run an earlier try judged is never taken over), so the retry submitted the workload again.
The worker's death is played by the XCom publication after the read raising ``SystemExit`` (nothing
after it runs, as in a killed process). ``Ti`` and ``Store`` stand in for Airflow's task instance and
task state store (tests/operators/task_context.py); the jobs run on the AWS Batch emulator over HTTP.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu.operators import batch
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.success_mark import SUCCESS_KEY
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.operators.test_batch_operator_runs import Store, Ti, described, operator

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]


def context(store: Store, try_number: int, max_tries: int = 2, retries: int = 2, clear_number: int = 0) -> Any:
    """Airflow's context as far as the record reads it: the task instance's ``max_tries``, its task's
    ``retries`` and the DAG run's ``clear_number``."""
    ti = Ti(try_number=try_number, max_tries=max_tries)
    ti.task = SimpleNamespace(retries=retries)  # type: ignore[attr-defined]
    return {"ti": ti, "dag_run": SimpleNamespace(clear_number=clear_number), "task_state_store": store}


def died_after_reading(monkeypatch: pytest.MonkeyPatch, store: Store, op: GPUBatchOperator) -> None:
    """Try 1: its job succeeds and is read, then its worker dies before the task ends."""
    real_publish = batch.publish

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(-9)

    monkeypatch.setattr(batch, "publish", killed)
    with pytest.raises(SystemExit):
        op.execute(context(store, 1))
    monkeypatch.setattr(batch, "publish", real_publish)


def test_a_retry_takes_over_the_success_a_killed_try_had_read(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Try 2 ends with try 1's result, the job's id, where it ran and its GPU profile (read again from the
    job's log, which outlives the try); no second job. Before, it submitted one: the workload ran twice."""
    emulator, store = aws_default_connection, Store()
    died_after_reading(monkeypatch, store, operator())
    (job,) = described(emulator)
    assert store[SUCCESS_KEY]["workload"] == job["jobId"] and store[SUCCESS_KEY]["result"] == {"loss": 0.25}
    retry = context(store, 2)
    assert operator().execute(retry) == {"loss": 0.25}
    assert [j["jobId"] for j in described(emulator)] == [job["jobId"]]  # the workload ran once
    xcom = retry["ti"].xcom
    assert xcom["batch_job_id"] == job["jobId"] and xcom["gpu_interruptions"] == []
    assert xcom["gpu_accelerator"]["capacity"] == "spot"  # the queue the job ran in, as try 1 would have said
    assert xcom["gpu_profile"]["exit_code"] == 0  # the profiler's own report, read again from the log


@pytest.mark.parametrize(
    "clearing",
    [
        {"clear_number": 1},  # a Clear of the run (the default: reset_dag_runs)
        {"max_tries": 3},  # a Clear of the task alone: max_tries = try_number + retries
        {"retries": 1},  # a Clear after the retries were lowered
    ],
)
def test_a_clear_after_the_success_runs_the_workload_again(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch, clearing: dict[str, int]
) -> None:
    """A user who clears a task whose try read its success asks for a new run: the record is not taken."""
    emulator, store = aws_default_connection, Store()
    died_after_reading(monkeypatch, store, operator(gpu_profile=False))
    assert operator(gpu_profile=False).execute(context(store, 2, **clearing)) == {"loss": 0.25}
    assert len(described(emulator)) == 2


def test_a_result_that_is_not_json_is_not_recorded(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """That try fails (the workload's bug); nothing is recorded for a retry to take over."""
    from airflow.sdk.exceptions import AirflowFailException

    store = Store()
    not_json = [sys.executable, "-c", "print('::airflow-gpu-result::{not json')"]
    with pytest.raises(AirflowFailException):
        operator(command=not_json, gpu_profile=False).execute(context(store, 1))
    assert SUCCESS_KEY not in store

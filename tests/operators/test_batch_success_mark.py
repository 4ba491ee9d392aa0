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
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu.operators import batch
from airflow_gpu.operators.batch import STATE_KEY, GPUBatchOperator
from airflow_gpu.operators.success_mark import SUCCESS_KEY
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.operators.task_context import Store, Ti
from tests.operators.test_batch_operator_deferred import gated_result, reclaim_when_running
from tests.operators.test_batch_operator_runs import described, operator
from tests.operators.test_batch_takeover import operator as slow_operator

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]


def context(store: Store, try_number: int, max_tries: int = 2, retries: int = 2, clear_number: int = 0) -> Any:
    """Airflow's context as far as the record reads it: the task instance's ``max_tries``, its task's
    ``retries`` and the DAG run's ``clear_number``."""
    ti = Ti(try_number=try_number, max_tries=max_tries)
    ti.task = SimpleNamespace(retries=retries)  # type: ignore[attr-defined]
    return {"ti": ti, "dag_run": SimpleNamespace(clear_number=clear_number), "task_state_store": store}


def died_after_reading(
    monkeypatch: pytest.MonkeyPatch, store: Store, op: GPUBatchOperator, at: str = "publish"
) -> None:
    """Try 1: its job succeeds and is read, then its worker dies before the task ends: at the XCom publication
    after the run was closed (``publish``), or before the run could be closed (``close``)."""
    real = getattr(batch, {"publish": "publish", "close": "save_run"}[at])

    def killed(*args: Any, **kwargs: Any) -> Any:
        closing = at == "publish" or kwargs.get("open_") is False
        if SUCCESS_KEY in store and closing:  # after the success was read and recorded, not at a reclaim
            raise SystemExit(-9)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch, real.__name__, killed)
    with pytest.raises(SystemExit):
        op.execute(context(store, 1))
    monkeypatch.setattr(batch, real.__name__, real)


@pytest.mark.parametrize("at", ["publish", "close"])
def test_a_retry_takes_over_the_success_a_killed_try_had_read(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    """Try 2 ends with try 1's result, the job's id, where it ran, its console links and its GPU profile (read
    again from the job and its log, which outlive the try); no second job. Before, it submitted one: the
    workload ran twice."""
    emulator, store = aws_default_connection, Store()
    died_after_reading(monkeypatch, store, operator(), at)
    assert store[STATE_KEY]["open"] is (at == "close")  # the run closed, or still open: the mark decides
    (job,) = described(emulator)
    assert store[SUCCESS_KEY]["workload"] == job["jobId"] and store[SUCCESS_KEY]["result"] == {"loss": 0.25}
    retry = context(store, 2)
    assert operator().execute(retry) == {"loss": 0.25}
    assert [j["jobId"] for j in described(emulator)] == [job["jobId"]]  # the workload ran once
    xcom = retry["ti"].xcom
    assert xcom["batch_job_id"] == job["jobId"] and xcom["gpu_interruptions"] == []
    assert xcom["gpu_accelerator"]["location"] == "gpu-spot"  # the queue the job ran in, from the record
    assert xcom["batch_job_details"]["job_id"] == job["jobId"]  # the links a new try's XCom lacks
    assert xcom["batch_job_queue"]["job_queue_arn"] == job["jobQueue"]
    assert xcom["cloudwatch_events"]["awslogs_stream_name"] == job["container"]["logStreamName"]
    assert xcom["gpu_profile"]["exit_code"] == 0  # the profiler's own report, read again from the log
    assert store[STATE_KEY]["open"] is False


def test_the_interruptions_before_the_success_are_taken_over_with_it(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Try 1's job was reclaimed on spot and its on-demand replacement succeeded: try 2 publishes that one
    interruption and the on-demand queue, as try 1 would have."""
    emulator, store, gate = aws_default_connection, Store(), tmp_path / "gate"
    reclaimer = reclaim_when_running(emulator, "train", after_line="checkpoint 1", then_open=gate)
    died_after_reading(monkeypatch, store, slow_operator(deferrable=False, command=gated_result(gate)))
    reclaimed_id = reclaimer.finished()
    reclaimed, replacement = described(emulator)
    assert reclaimed_id == reclaimed["jobId"]
    retry = context(store, 2)
    assert slow_operator(deferrable=False, command=gated_result(gate)).execute(retry) == {"loss": 0.25}
    assert len(described(emulator)) == 2
    (interruption,) = retry["ti"].xcom["gpu_interruptions"]
    assert interruption["workload"] == reclaimed["jobId"]
    assert retry["ti"].xcom["batch_job_id"] == replacement["jobId"]
    assert retry["ti"].xcom["gpu_accelerator"]["capacity"] == "on-demand"


def test_a_job_batch_no_longer_describes_still_hands_over_its_result(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS Batch describes an ended job for about seven days: a retry after that (or through an outage that
    outlasts the hook's retries) still ends with the recorded result; only the links and the profile are
    missing, and the profile says why."""
    store = Store()
    died_after_reading(monkeypatch, store, operator())
    retry, op = context(store, 2), operator()
    monkeypatch.setattr(op.gpu_hook, "describe_jobs_batched", lambda ids: {})
    assert op.execute(retry) == {"loss": 0.25}
    assert "no longer described by AWS Batch" in retry["ti"].xcom["gpu_profile"]["note"]
    assert "batch_job_details" not in retry["ti"].xcom
    retry, op = context(Store(dict(store)), 2), operator()

    def denied(ids: Any) -> Any:
        raise RuntimeError("AccessDeniedException")

    monkeypatch.setattr(op.gpu_hook, "describe_jobs_batched", denied)
    assert op.execute(retry) == {"loss": 0.25}
    assert "AccessDeniedException" in retry["ti"].xcom["gpu_profile"]["note"]


@pytest.mark.parametrize(
    "clearing",
    [
        {"max_tries": 3, "clear_number": 1},  # a Clear: max_tries = try + retries, and the run's count
        {"max_tries": 3},  # a Clear that leaves the run (REST reset_dag_runs=False): max_tries = try + retries
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


def test_a_clear_of_another_task_of_the_run_leaves_the_success_to_the_retry(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's ``clear_number`` rises for a Clear of any of its tasks (the twelfth soak: a cleared shard made
    others run again): a retry still takes this task's recorded success over, and submits nothing."""
    emulator, store = aws_default_connection, Store()
    died_after_reading(monkeypatch, store, operator(gpu_profile=False))
    assert operator(gpu_profile=False).execute(context(store, 2, clear_number=1)) == {"loss": 0.25}
    assert len(described(emulator)) == 1


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

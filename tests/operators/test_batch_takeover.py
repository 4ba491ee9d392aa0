"""A new try of a deferred ``GPUBatchOperator`` whose earlier try's resume was lost (issue 26) takes over the job
its trigger submitted and saw succeed, instead of submitting the workload again. Against the AWS Batch emulator;
the trigger runs in an event loop of this process as the triggerer runs it (``test_batch_operator_deferred``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.operators.batch import STATE_KEY, GPUBatchOperator
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.operators.conftest import LOG_LAG
from tests.operators.test_batch_operator_deferred import (
    QUEUES,
    SLOW_RESULT,
    connections_read_in_the_event_loop_only,
    defer,
    first_event,
    gated_result,
    reclaim_when_running,
    trigger_of,
)
from tests.operators.test_batch_operator_runs import Store, Ti, described, stopped_at

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]
__all__ = ["connections_read_in_the_event_loop_only"]  # autouse: no connection read outside the event loop


def operator(deferrable: bool, command: list[str] = SLOW_RESULT) -> GPUBatchOperator:
    """``test_batch_operator_deferred``'s operator (the same job, spot budget 0), deferrable or not."""
    return GPUBatchOperator(
        task_id="train", accelerator="A10G:1", command=command, job_queues=QUEUES, poll_interval=0.2,
        awslogs_fetch_interval=0.5, log_lag=LOG_LAG, spot={"capacity_timeout": 60.0, "max_interruptions": 0},
        deferrable=deferrable,
    )  # fmt: skip


@pytest.mark.parametrize("deferrable", [True, False])
def test_a_retry_takes_over_the_replacement_the_lost_tries_trigger_saw_succeed(
    aws_default_connection: BatchEmulator, capfd: pytest.CaptureFixture[str], deferrable: bool, tmp_path: Path
) -> None:
    """Try 1 deferred; its job was reclaimed past the spot budget and the trigger submitted ``train-r1`` on
    on-demand, which succeeded; the resume was lost. The task state store still names the reclaimed ``train``
    (the trigger cannot write it). Try 2 judges ``train`` as the trigger did (the interruption recorded once, at
    the time it happened), finds the trigger's ``train-r1`` of try 1 where its own next job would go, and takes
    its result: no third job. Before, it submitted ``train-r1`` again for try 2, the workload's second run."""
    emulator, store = aws_default_connection, Store()
    first: dict[str, Any] = {"ti": Ti(try_number=1, max_tries=1), "task_state_store": store}
    gate = tmp_path / "gate"
    deferred = defer(first, command=gated_result(gate))  # test_batch_operator_deferred's operator: deferrable
    reclaimer = reclaim_when_running(emulator, "train", after_line="checkpoint 1", then_open=gate)
    event = asyncio.run(first_event(trigger_of(deferred)))
    reclaimed = reclaimer.finished()
    assert event["status"] == "done" and event["job_status"] == "SUCCEEDED"  # and the resume is lost
    ti = Ti(try_number=2, max_tries=1)
    capfd.readouterr()
    retry = operator(deferrable=deferrable, command=gated_result(gate))
    assert retry.execute({"ti": ti, "task_state_store": store}) == {"loss": 0.25}
    jobs = described(emulator)
    assert reclaimed == jobs[0]["jobId"]
    said = f"Took over job {jobs[1]['jobId']} (train-r1), which try 1's trigger submitted, instead of submitting it"
    assert said in capfd.readouterr().out  # the task log
    assert [(j["jobName"], j["status"], j["tags"]["airflow-gpu/try"]) for j in jobs] == [
        ("train", "FAILED", "1"), ("train-r1", "SUCCEEDED", "1"),
    ]  # fmt: skip
    (interruption,) = ti.xcom["gpu_interruptions"]
    assert interruption["workload"] == jobs[0]["jobId"] and interruption["time"] == stopped_at(jobs[0]["attempts"][-1])
    assert ti.xcom["batch_job_id"] == jobs[1]["jobId"] and ti.xcom["gpu_accelerator"]["capacity"] == "on-demand"
    assert store[STATE_KEY]["open"] is False and store[STATE_KEY]["run"]["workload"] == jobs[1]["jobId"]

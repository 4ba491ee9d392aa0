"""``GPUBatchJobTrigger`` in an event loop of this process against the AWS Batch emulator (moto's
HTTP server), as the triggerer runs it: the events it fires and what ``on_kill`` does."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.batch import GPUBatchJobTrigger

pytestmark = pytest.mark.slow


def submit(emulator: BatchEmulator, command: list[str], queue: str = "gpu-on-demand") -> str:
    batch = emulator.client("batch")
    definition = batch.register_job_definition(
        jobDefinitionName="t",
        type="container",
        containerProperties={"image": "busybox", "command": command, "resourceRequirements": [
            {"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}]},
    )["jobDefinitionArn"]  # fmt: skip
    return str(batch.submit_job(jobName="t", jobQueue=queue, jobDefinition=definition)["jobId"])


async def first_event(trigger: GPUBatchJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def test_it_fires_when_the_job_ends_and_after_capacity_timeout_in_runnable(
    aws_default_connection: BatchEmulator,
) -> None:
    emulator = aws_default_connection
    done = submit(emulator, ["true"])
    event = asyncio.run(first_event(GPUBatchJobTrigger(done, poll_interval=0.2, capacity_timeout=60)))
    assert event == {"status": "done", "job_id": done, "job_status": "SUCCEEDED"}
    emulator.stall("gpu-spot-ce", reason=None)  # no reason at all: RUNNABLE is enough
    stuck = submit(emulator, ["true"], queue="gpu-spot")
    event = asyncio.run(first_event(GPUBatchJobTrigger(stuck, poll_interval=0.2, capacity_timeout=1)))
    assert event["status"] == "capacity_timeout" and event["job_id"] == stuck


def test_on_kill_terminates_the_job_without_blocking_the_event_loop(aws_default_connection: BatchEmulator) -> None:
    """Mark Failed on a deferred task (Airflow 3.3): the job stops. The client is built and called in
    a thread: the event loop, which every deferred task of the triggerer shares, runs meanwhile."""
    emulator = aws_default_connection
    job_id = submit(emulator, [sys.executable, "-c", "import time; time.sleep(60)"])  # runs until killed
    wait_for(lambda: emulator._job(job_id).status == "RUNNING", timeout=60, what="the job to run")

    async def kill_and_watch_the_loop() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        await GPUBatchJobTrigger(job_id, poll_interval=0.2).on_kill()
        ticker.cancel()
        return ticks

    ticks = asyncio.run(kill_and_watch_the_loop())
    assert ticks > 1  # the loop went on while the job was terminated
    job = wait_for(lambda: emulator._job(job_id).status == "FAILED" and emulator._job(job_id), 60, "the stop")
    assert job.job_stopped_reason == "Task killed by the user"

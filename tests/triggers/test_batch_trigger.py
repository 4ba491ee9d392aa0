"""``GPUBatchJobTrigger`` in an event loop of this process against the AWS Batch emulator (moto's
HTTP server), as the triggerer runs it: the events it fires and what ``on_kill`` does."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_gpu.hooks import batch as batch_hook
from airflow_gpu.hooks.batch import GPUBatchHook
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.batch import GPUBatchJobTrigger
from airflow_gpu.utils import batch_retries

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


def test_on_kill_terminates_the_job_without_blocking_the_event_loop(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mark Failed on a deferred task (Airflow 3.3): the job stops. The client is built and called in
    a thread: the event loop, which every deferred task of the triggerer shares, runs meanwhile."""
    emulator = aws_default_connection
    client_threads: list[threading.Thread] = []
    build = GPUBatchHook.get_client_type

    def client(hook: GPUBatchHook, *args: Any, **kwargs: Any) -> Any:  # it may assume a role (STS): never in the loop
        client_threads.append(threading.current_thread())
        return build(hook, *args, **kwargs)

    monkeypatch.setattr(GPUBatchHook, "get_client_type", client)
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
    assert client_threads and threading.main_thread() not in client_threads
    job = wait_for(lambda: emulator._job(job_id).status == "FAILED" and emulator._job(job_id), 60, "the stop")
    assert job.job_stopped_reason == "Task killed by the user"


def test_a_lone_trigger_hears_of_a_failed_connection_read_and_goes_on(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared poller reads its connection from the supervisor; a read that fails once (a broken
    channel, say) fails that round for its waiters, who poll again: none is left waiting forever."""
    emulator = aws_default_connection
    done = submit(emulator, ["true"])
    real = GPUBatchHook.aget_connection.__func__  # type: ignore[attr-defined]
    failures = [RuntimeError("Response read out of order")]

    async def flaky(cls: type, conn_id: str) -> Any:
        if failures:
            raise failures.pop()
        return await real(cls, conn_id)

    monkeypatch.setattr(GPUBatchHook, "aget_connection", classmethod(flaky))
    monkeypatch.setattr(batch_hook, "_LAST_READ", {})  # no good read before this one (another test's)
    trigger = GPUBatchJobTrigger(done, poll_interval=0.2)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 30))
    assert not failures and event["status"] == "done" and event["job_status"] == "SUCCEEDED"


@pytest.mark.parametrize(
    "failure",
    [
        AirflowNotFoundException("The conn_id `aws_gpu` isn't defined"),  # how a transient error reads
        RuntimeError("Response read out of order"),
    ],
)
def test_a_failed_re_read_keeps_the_connection_read_before(monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    """The supervisor answers a transient error as "not found" (Airflow's ``ExecutionAPISecretsBackend``
    returns None on any error response, then ``aget_connection`` raises ``AirflowNotFoundException``).
    The poller, which reads its connection again every ``HOOK_TTL`` (0 here: every round), keeps the
    credentials of the read before; it must not turn to the triggerer's own boto3 credential chain."""
    from airflow.sdk import Connection

    from airflow_gpu.triggers import batch as batch_trigger
    from airflow_gpu.triggers.batch import SharedJobPoller

    monkeypatch.setattr(batch_hook, "_LAST_READ", {})
    monkeypatch.setattr(batch_trigger, "HOOK_TTL", 0.0)
    good = Connection(conn_id="aws_gpu", conn_type="aws", login="AKIAGPUTRIGGER000001", password="gpu-secret-key")
    answers: list[Any] = [good, failure, failure]

    async def aget_connection(cls: type, conn_id: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    keys: list[str | None] = []

    def describe(hook: GPUBatchHook, ids: Any) -> dict[str, Any]:
        keys.append(hook.conn_config.aws_access_key_id)  # the credentials this round calls Batch with
        return {job_id: {"jobId": job_id, "status": "RUNNING"} for job_id in ids}

    monkeypatch.setattr(GPUBatchHook, "aget_connection", classmethod(aget_connection))
    monkeypatch.setattr(GPUBatchHook, "describe_jobs_batched", describe)

    async def three_rounds() -> None:
        poller = SharedJobPoller.get("aws_gpu", "us-east-1", 0.01)
        for _ in range(3):
            assert (await poller.next_description("job-1") or {}).get("status") == "RUNNING"

    asyncio.run(asyncio.wait_for(three_rounds(), 30))
    assert not answers and keys == ["AKIAGPUTRIGGER000001"] * 3


def test_the_poller_reads_its_connection_again_after_a_failed_round(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A triggerer that never goes idle keeps its poller: a connection that stops working (rotated
    keys, a moved endpoint) and is then fixed must reach it, not fail every DescribeJobs from then on."""
    emulator = aws_default_connection
    done = submit(emulator, ["true"])
    stale = emulator.airflow_connection()
    stale["extra"] = {  # nothing listens on port 9: every call fails at once
        **stale["extra"], "endpoint_url": "http://127.0.0.1:9",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(stale))
    # A refused connection is transient (utils/batch_retries): its rounds pause for minutes in all, which
    # is the production wait, not what this test is about (a failed round, then the edited connection).
    monkeypatch.setattr(batch_retries, "pause", lambda round_: 0.01)
    failed_rounds: list[str] = []

    async def fixed_while_it_waits() -> dict[str, Any]:
        trigger = GPUBatchJobTrigger(done, poll_interval=0.2, max_errors=30)
        waiting = asyncio.create_task(first_event(trigger))
        while not failed_rounds:
            await asyncio.sleep(0.1)
        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = emulator.airflow_connection_uri()  # the edit
        return await asyncio.wait_for(waiting, 30)

    real_describe = GPUBatchHook.describe_jobs_batched

    def describe(hook: GPUBatchHook, ids: Any) -> Any:
        try:
            return real_describe(hook, ids)
        except Exception as error:
            failed_rounds.append(type(error).__name__)
            raise

    monkeypatch.setattr(GPUBatchHook, "describe_jobs_batched", describe)
    event = asyncio.run(fixed_while_it_waits())
    assert failed_rounds and event["status"] == "done" and event["job_status"] == "SUCCEEDED"


def test_a_job_whose_capacity_cancel_did_not_take_is_terminated_before_the_trigger_moves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trigger cancels a job RUNNABLE past ``capacity_timeout`` and waits for the cancel through
    the shared poller. Behind the head of its queue the job stays RUNNABLE (earlier CancelJob
    references); once the wait is over, the trigger terminates it, so it cannot start later."""
    from airflow_gpu.hooks import batch as batch_hook
    from airflow_gpu.triggers.batch import SharedJobPoller

    monkeypatch.setattr(batch_hook, "CANCEL_TIMEOUT", 1.0)
    with BatchEmulator(stop_timeout=2, cancel_at_head=True) as emulator:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", emulator.airflow_connection_uri())
        emulator.stall("gpu-spot-ce")
        head, behind = (submit(emulator, ["true"], queue="gpu-spot") for _ in range(2))
        wait_for(lambda: emulator._job(behind).status == "RUNNABLE", 30, "the job to be RUNNABLE")
        trigger = GPUBatchJobTrigger(behind, poll_interval=0.2, capacity_timeout=1)
        poller = SharedJobPoller.get("aws_default", None, 0.2)
        job = emulator.client("batch").describe_jobs(jobs=[behind])["jobs"][0]
        ended = asyncio.run(trigger._cancel_for_capacity(poller, job))
        assert ended["status"] == "FAILED"
        emulator.release("gpu-spot-ce")
        wait_for(lambda: emulator._job(head).status == "SUCCEEDED", 30, "the head job to run")
        stopped = wait_for(lambda: (j := emulator._job(behind)).status in ("SUCCEEDED", "FAILED") and j, 30, "its end")
        assert stopped.status == "FAILED" and not stopped.attempts  # it never started

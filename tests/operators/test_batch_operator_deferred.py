"""A deferred ``GPUBatchOperator`` whose trigger carries the spot run on, against the AWS Batch emulator.

The operator defers as on a worker; the trigger runs in an event loop of this process as the
triggerer runs it, rebuilt from its serialized arguments (as Airflow stores and loads it), with
``deferred_at`` dropped so that the resume dwell (``resume_dwell``, an Airflow race that needs a
scheduler) does not slow the tests. ``Ti`` and ``Store`` stand in for Airflow's task instance and
task state store (see ``test_batch_operator_runs``); the end-to-end tests run these paths through
a real Airflow. Every expectation is taken over the emulator's whole record of submitted jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu.operators.batch import STATE_KEY, GPUBatchOperator
from airflow_gpu.spot.batch import CAPACITY_CANCEL_PREFIX, KILLED
from airflow_gpu.spot.policy import Placement
from airflow_gpu.testing.batch.compute import LOG_GROUP
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.batch import GPUBatchJobTrigger
from airflow_gpu.triggers.batch_resubmission import BatchResubmission
from tests.kill_budget import ON_KILL_BUDGET, refused_when_given_up_and_later
from tests.operators.conftest import LOG_INGESTION_DELAY, LOG_LAG
from tests.operators.test_batch_operator_runs import (
    RESULT,
    Store,
    Ti,
    assert_node_loss_resubmitted,
    described,
    lose_node_1_when_it_runs,
    multi_node,
    stopped_at,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
#: Runs long enough to be reclaimed, then prints the result (the sleep is the workload's run time, not a wait).
SLOW_RESULT = [sys.executable, "-c", f"import time; print('checkpoint 1', flush=True); time.sleep(6); {RESULT}"]


@pytest.fixture(autouse=True)
def connections_read_in_the_event_loop_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a triggerer a connection comes from the supervisor; Airflow 3.2 breaks its channel when a
    thread asks while the event loop does ("Response read out of order"), killing every trigger.
    The triggers read connections in the loop (``GPUBatchHook.for_trigger``): a read from any other
    thread while a trigger runs fails the test (the worker's own log threads may read theirs)."""
    from airflow.sdk.definitions.connection import Connection

    get = Connection.get.__func__  # type: ignore[attr-defined]

    def main_thread_only(cls: type, conn_id: str) -> Any:
        if TRIGGERS_RUNNING and threading.current_thread() is not threading.main_thread():
            raise AssertionError(f"connection {conn_id} read from thread {threading.current_thread().name}")
        return get(cls, conn_id)

    monkeypatch.setattr(Connection, "get", classmethod(main_thread_only))


def operator(**kwargs: Any) -> GPUBatchOperator:
    kwargs.setdefault("accelerator", "A10G:1")
    kwargs.setdefault("command", SLOW_RESULT)
    spot = {"capacity_timeout": 60.0, "max_interruptions": 0, **kwargs.pop("spot", {})}
    return GPUBatchOperator(
        task_id="train", job_queues=QUEUES, poll_interval=0.2, awslogs_fetch_interval=0.5, log_lag=LOG_LAG,
        spot=spot, deferrable=True, **kwargs,
    )  # fmt: skip


class TriggerLog(logging.Handler):
    """What the triggers wrote to their log (the task's log, in a triggerer)."""

    lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def trigger_of(deferred: TaskDeferred) -> GPUBatchJobTrigger:
    """The trigger as the triggerer loads it: from what Airflow stored; its log to ``TriggerLog``."""
    _, kwargs = deferred.trigger.serialize()
    trigger = GPUBatchJobTrigger(**{**kwargs, "deferred_at": None})
    logger = logging.getLogger("tests.trigger")
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        logger.addHandler(TriggerLog())
    trigger._log = logger
    return trigger


#: Triggers running now (``first_event``); the worker side runs only while none does.
TRIGGERS_RUNNING: list[GPUBatchJobTrigger] = []


async def first_event(trigger: GPUBatchJobTrigger) -> dict[str, Any]:
    TRIGGERS_RUNNING.append(trigger)
    try:
        async for event in trigger.run():
            return dict(event.payload)
    finally:
        TRIGGERS_RUNNING.remove(trigger)
    raise AssertionError("the trigger ended without an event")


def defer(context: dict[str, Any], **kwargs: Any) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        operator(**kwargs).execute(context)  # type: ignore[arg-type]
    return deferred.value


def resume(deferred: TaskDeferred, event: dict[str, Any], context: dict[str, Any], **kwargs: Any) -> Any:
    """Airflow's resume on a fresh worker process (a new operator object)."""
    return operator(**kwargs).resume_execution(
        deferred.method_name, {**(deferred.kwargs or {}), "event": event}, context
    )  # type: ignore[arg-type]


def gated_result(gate: Path, python: str = sys.executable) -> list[str]:
    """A workload that prints ``checkpoint 1``, then its result once ``gate`` exists. ``reclaim_when_running``
    opens the gate only after the job it reclaimed has stopped: that job never finishes first, however slowly
    a loaded machine runs the reclaimer (a fixed run time raced it), and its replacement finishes at once.
    Exits with an error and no result if the gate stays shut for two minutes."""
    script = (
        "import os, sys, time\n"
        "print('checkpoint 1', flush=True)\n"
        "deadline = time.monotonic() + 120\n"
        f"while not os.path.exists({str(gate)!r}):\n"
        "    if time.monotonic() > deadline:\n"
        "        sys.exit('the gate stayed shut')\n"
        "    time.sleep(0.05)\n"  # the interval of its wait on the gate file, an observable state
        f"{RESULT}\n"
    )
    return [python, "-c", script]


class Reclaimer(threading.Thread):
    """A spot reclaim of the job named ``name`` once it runs (and its log stream has ``after_line``), from
    outside the event loop; then, once that job has stopped, ``then_open`` is created (``gated_result``).
    ``finished`` waits for it and raises what went wrong in the thread, which a thread would only print."""

    def __init__(self, emulator: BatchEmulator, name: str, after_line: str | None, then_open: Path | None) -> None:
        super().__init__(daemon=True, name=f"reclaim {name}")
        self.emulator, self.job_name, self.after_line, self.then_open = emulator, name, after_line, then_open
        self.error: BaseException | None = None
        self.job_id: str | None = None
        self.reclaimed = threading.Event()  # the reclaim asked for, the job perhaps still stopping

    def running(self) -> dict[str, Any] | None:
        jobs = described(self.emulator)
        job = next((j for j in jobs if j["jobName"] == self.job_name and j["status"] == "RUNNING"), None)
        if job is None or self.after_line is None:
            return job
        stream = job["container"].get("logStreamName")
        logs = self.emulator.client("logs")
        try:
            events = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=stream, startFromHead=True)["events"]
        except logs.exceptions.ResourceNotFoundException:
            return None
        return job if any(e["message"] == self.after_line for e in events) else None

    def stopped(self) -> bool:
        (job,) = self.emulator.client("batch").describe_jobs(jobs=[self.job_id])["jobs"]
        return job["status"] in ("SUCCEEDED", "FAILED")

    def run(self) -> None:
        try:
            job = wait_for(self.running, 60, f"{self.job_name} to run")
            self.emulator.reclaim(job["jobId"])
            self.job_id = job["jobId"]
            self.reclaimed.set()
            if self.then_open is not None:
                wait_for(self.stopped, 60, f"the reclaimed {self.job_name} to stop")
                self.then_open.touch()
        except BaseException as error:  # handed to the test by finished()
            self.error = error

    def finished(self, timeout: float = 60) -> str:
        """The reclaimed job's id, once the reclaim (and the gate) is done."""
        self.join(timeout)
        if self.error is not None:
            raise AssertionError(f"the reclaim of {self.job_name} failed") from self.error
        if self.job_id is None:
            raise AssertionError(f"{self.job_name} was not reclaimed within {timeout} s")
        return self.job_id


def reclaim_when_running(
    emulator: BatchEmulator, name: str, after_line: str | None = None, then_open: Path | None = None
) -> Reclaimer:
    """``Reclaimer``, started."""
    reclaimer = Reclaimer(emulator, name, after_line, then_open)
    reclaimer.start()
    return reclaimer


def test_a_reclaim_past_the_spot_budget_is_resubmitted_on_demand_by_the_trigger(
    aws_default_connection: BatchEmulator, tmp_path: Path
) -> None:
    """One deferral, one resume: the trigger submits the on-demand job itself, and the task comes back
    for its result only, with the interruption recorded once and the reclaimed job's output logged."""
    emulator, ti, store, gate = aws_default_connection, Ti(), Store(), tmp_path / "gate"
    context = {"ti": ti, "task_state_store": store}
    deferred = defer(context, command=gated_result(gate))
    reclaimer = reclaim_when_running(emulator, "train", after_line="checkpoint 1", then_open=gate)
    event = asyncio.run(first_event(trigger_of(deferred)))
    reclaimed = reclaimer.finished()
    assert event["status"] == "done" and event["job_status"] == "SUCCEEDED"
    # no second deferral: nothing left to wait for
    assert resume(deferred, event, context, command=gated_result(gate)) == {"loss": 0.25}
    jobs = described(emulator)
    assert reclaimed == jobs[0]["jobId"]
    assert [(j["jobName"], j["jobQueue"].rsplit("/", 1)[-1], j["status"]) for j in jobs] == [
        ("train", "gpu-spot", "FAILED"),
        ("train-r1", "gpu-on-demand", "SUCCEEDED"),
    ]
    assert jobs[1]["createdAt"] >= jobs[0]["stoppedAt"]  # never two jobs of the try at once
    assert jobs[1]["tags"] == jobs[0]["tags"]  # the task try's identity: a retry can find it
    environment = {e["name"]: e["value"] for e in jobs[1]["container"]["environment"]}
    assert environment["AIRFLOW_GPU_ATTEMPT"] == "2" and environment["AIRFLOW_GPU_CAPACITY"] == "on-demand"
    assert event["job_id"] == jobs[1]["jobId"] == ti.xcom["batch_job_id"]
    [interruption] = ti.xcom["gpu_interruptions"]
    assert interruption["workload"] == jobs[0]["jobId"] and interruption["outcome"] == "preempted"
    assert interruption["time"] == stopped_at(jobs[0]["attempts"][-1])  # when it happened, not when it was seen
    assert ti.xcom["batch_job_details"]["job_id"] == jobs[1]["jobId"]
    assert store[STATE_KEY]["open"] is False and store[STATE_KEY]["run"]["workload"] == jobs[1]["jobId"]
    assert f"[{jobs[0]['jobId']}] checkpoint 1" in TriggerLog.lines  # the trigger wrote the reclaimed job's log


def test_a_restarted_trigger_follows_the_job_it_submitted_and_on_kill_stops_that_one(
    aws_default_connection: BatchEmulator,
) -> None:
    """A triggerer restart replays the trigger from its first arguments: the replacement it submitted
    before is found by name and task try (SubmitJob has no idempotency token), never submitted twice.
    Mark Failed then terminates the replacement, the job the trigger follows now: as the triggerer
    does it, the trigger's run is cancelled first, then ``on_kill`` is called."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    reclaim_when_running(emulator, "train")

    async def until_replaced_then_restart() -> str:
        first = asyncio.create_task(first_event(trigger_of(deferred)))
        await asyncio.to_thread(wait_for, lambda: len(described(emulator)) == 2, 60, "the replacement")
        first.cancel()  # the triggerer dies
        replay = trigger_of(deferred)
        again = asyncio.create_task(first_event(replay))
        await asyncio.to_thread(
            wait_for, lambda: replay.job_id != deferred.trigger.serialize()[1]["job_id"], 60, "the replay to follow it"
        )
        await cancelled(again)  # Mark Failed while deferred (Airflow 3.3): the trigger is cancelled...
        await replay.on_kill()  # ...then told
        return replay.job_id

    followed = asyncio.run(until_replaced_then_restart())
    jobs = described(emulator)
    assert [j["jobName"] for j in jobs] == ["train", "train-r1"] and followed == jobs[1]["jobId"]
    job = wait_for(lambda: (j := described(emulator)[1])["status"] == "FAILED" and j, 60, "the stop")
    assert job["statusReason"] == KILLED[0]


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel a trigger's run as the triggerer does, and wait for it to end."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def replaced(emulator: BatchEmulator, deferred: TaskDeferred) -> str:
    """Run the trigger until it has submitted the replacement of the reclaimed job, then drop it."""
    reclaim_when_running(emulator, "train")

    async def until_replaced() -> None:
        task = asyncio.create_task(first_event(trigger_of(deferred)))
        await asyncio.to_thread(wait_for, lambda: len(described(emulator)) == 2, 60, "the replacement")
        await cancelled(task)

    asyncio.run(until_replaced())
    return str(described(emulator)[1]["jobId"])


def test_a_trigger_that_crashed_leaves_no_replacement_running(aws_default_connection: BatchEmulator) -> None:
    """The trigger fails (``__fail__``: TaskDeferralError) after it submitted a replacement the worker
    never heard of: the try fails, and the replacement is terminated, not left beside a retry's job."""
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
    from airflow.sdk.exceptions import TaskDeferralError

    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    replacement = replaced(emulator, deferred)
    failure = {"error": "Trigger failure", "traceback": ["RuntimeError: boom"]}
    with pytest.raises(TaskDeferralError):
        operator(command=slow).resume_execution(TRIGGER_FAIL_REPR, failure, context)  # type: ignore[arg-type]
    job = wait_for(lambda: (j := emulator._job(replacement)).status == "FAILED" and j, 20, "the replacement to stop")
    assert job.job_stopped_reason == KILLED[2]


def test_a_try_that_gives_up_waiting_stops_the_triggers_job_and_records_it(
    aws_default_connection: BatchEmulator,
) -> None:
    """The trigger could not follow its job (``error`` events, ``MAX_TRIGGER_ERRORS`` times): the try
    fails, and the job the trigger followed, its own replacement, is saved and terminated."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_gpu.operators.batch_deferral import MAX_TRIGGER_ERRORS

    emulator, store = aws_default_connection, Store()
    context = {"ti": Ti(), "task_state_store": store}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    replacement = replaced(emulator, deferred)
    event = {"status": "error", "job_id": replacement, "message": "DescribeJobs throttled"}
    kwargs = {**(deferred.kwargs or {}), "event": event, "errors": MAX_TRIGGER_ERRORS}
    with pytest.raises(AirflowException, match="failed"):
        operator(command=slow).resume_execution(deferred.method_name, kwargs, context)  # type: ignore[arg-type]
    job = wait_for(lambda: (j := emulator._job(replacement)).status == "FAILED" and j, 20, "the replacement to stop")
    assert job.job_stopped_reason == KILLED[2]
    assert store[STATE_KEY]["run"]["workload"] == replacement and store[STATE_KEY]["open"] is False


def kill_while_submitting(
    emulator: BatchEmulator, deferred: TaskDeferred, answer_after: float, budget: float
) -> GPUBatchJobTrigger:
    """Mark Failed while the trigger's SubmitJob of the reclaimed job's replacement is in flight: Batch
    creates the job at once and answers ``answer_after`` s later. As the triggerer does it, the run is
    cancelled (the SubmitJob goes on in its thread), then ``on_kill`` is waited for ``budget`` s at most
    (``run_trigger``'s ``on_kill_timeout``). Returns once the submitting thread ended (``asyncio.run``
    waits for it), as the triggerer process lives on after the kill."""
    reclaim_when_running(emulator, "train")
    trigger = trigger_of(deferred)
    held = emulator.slow("SubmitJob", answer_after)  # the worker's SubmitJob is done: the next is the trigger's

    async def body() -> None:
        running = asyncio.create_task(first_event(trigger))
        await asyncio.to_thread(wait_for, lambda: held.hits == 1, 60, "the trigger's SubmitJob to reach Batch")
        await cancelled(running)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(trigger.on_kill(), budget)

    asyncio.run(body())
    return trigger


def the_try_ended(emulator: BatchEmulator, timeout: float = 20) -> list[dict[str, Any]]:
    """Every job of the try (the emulator's whole record), once none is queued or running; fails the test
    if one still is after ``timeout`` s (a job left running is billed until someone stops it)."""
    live = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
    return wait_for(
        lambda: (jobs := described(emulator)) and all(j["status"] not in live for j in jobs) and jobs,
        timeout, "every job of the try to end",
    )  # fmt: skip


def test_mark_failed_while_the_trigger_submits_stops_the_job_it_submits(aws_default_connection: BatchEmulator) -> None:
    """Mark Failed while the trigger's SubmitJob is under way, its answer landing within the kill's budget:
    the submitting thread hears of the kill and terminates the job it created, with a reason that says so
    (a ``KILLED`` reason: no later try takes it over); ``on_kill`` hears that it was stopped."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    kill_while_submitting(emulator, deferred, answer_after=1, budget=30)
    jobs = the_try_ended(emulator)
    assert [j["jobName"] for j in jobs] == ["train", "train-r1"]
    assert jobs[1]["statusReason"].startswith(KILLED[0]) and "being killed" in jobs[1]["statusReason"]


def test_mark_failed_past_the_kill_budget_still_stops_the_job_its_submit_creates(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Mark Failed while the trigger's SubmitJob is in flight, its answer later than ``[triggerer]
    on_kill_timeout`` (4 s here): the kill gives up waiting for it, but the thread (its context copied
    before the kill, so not bounded by the budget) learns of the kill and terminates the job when the
    answer lands, instead of leaving it running, billed, until someone runs ``airflow-gpu reap``. The
    kill's ERROR names the submission in flight (its name and queue), not the job that had ended."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "4")
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    ended = str(deferred.trigger.serialize()[1]["job_id"])
    with caplog.at_level(logging.INFO):
        kill_while_submitting(emulator, deferred, answer_after=8, budget=4)
    try:
        jobs = the_try_ended(emulator)
    finally:  # a failed test leaves nothing running for the next
        for job in described(emulator):
            emulator.client("batch").terminate_job(jobId=job["jobId"], reason="test over")
    assert [j["jobName"] for j in jobs] == ["train", "train-r1"]
    replacement = jobs[1]
    assert replacement["statusReason"].startswith(KILLED[0]) and "being killed" in replacement["statusReason"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("train-r1" in e and "gpu-on-demand" in e for e in errors), errors
    assert not any(f"AWS Batch job {ended}" in e for e in errors), errors  # it had ended: nothing of it runs
    said = [r.getMessage() for r in caplog.records]
    assert any(replacement["jobId"] in line and "killed" in line for line in said), said


def test_a_kill_batch_keeps_refusing_gives_up_within_the_on_kill_budget_naming_the_job(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """TerminateJob fails (500) for good. The triggerer waits ``[triggerer] on_kill_timeout`` (4 s here) for
    ``on_kill``; the kill's TerminateJobs are retried within that, not in botocore's attempts and our rounds
    for minutes after the runner gave up, and an ERROR names the job left running."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(ON_KILL_BUDGET))
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    deferred = defer(context, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    trigger = trigger_of(deferred)
    job = emulator._job(trigger.job_id)
    wait_for(lambda: job.status == "RUNNING", timeout=60, what="the job to run")
    refused = emulator.fail("TerminateJob", "server", times=10_000)
    body = refused_when_given_up_and_later(
        first_event(trigger), trigger.on_kill, lambda: refused.hits, wait_for_the_cancel=True, watch=4
    )
    try:
        with caplog.at_level(logging.ERROR):
            given_up, later = asyncio.run(body)
    finally:
        refused.times = refused.hits  # disarmed
        emulator.client("batch").terminate_job(jobId=job.job_id, reason="test over")
    assert given_up >= 1 and later == given_up
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"left running: AWS Batch job {job.job_id}" in e for e in errors), errors


def test_capacity_timeout_cancels_and_moves_on_from_the_trigger(aws_default_connection: BatchEmulator) -> None:
    emulator, ti = aws_default_connection, Ti()
    context = {"ti": ti, "task_state_store": Store()}
    emulator.stall("gpu-spot-ce")
    deferred = defer(context, command=[sys.executable, "-c", RESULT], spot={"capacity_timeout": 1.0})
    event = asyncio.run(first_event(trigger_of(deferred)))
    assert resume(deferred, event, context, spot={"capacity_timeout": 1.0}) == {"loss": 0.25}
    first, second = described(emulator)
    assert first["statusReason"].startswith(CAPACITY_CANCEL_PREFIX) and not first.get("attempts")
    assert second["jobName"] == "train-r1" and second["jobQueue"].endswith("/gpu-on-demand")
    assert [i["outcome"] for i in ti.xcom["gpu_interruptions"]] == []  # no capacity is no interruption


def test_the_trigger_skips_a_placement_its_queue_does_not_launch_as_the_worker_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spot queue launches g5 (A10G) only, the on-demand queue g5 and g6 (L4). A10G gets no spot
    capacity; the policy's next placement, L4 on spot, is one the spot queue never launches: the
    trigger submits L4 to the on-demand queue at once, as the worker's ``submit_job`` would, from
    what the worker read of the queues (the triggerer describes no compute environment)."""
    from airflow_gpu.testing.batch.compute import DEMO, BatchSetup, ComputeEnvironmentSpec

    setup = BatchSetup(
        (
            ComputeEnvironmentSpec("gpu-spot-ce", "SPOT", ("g5",)),
            ComputeEnvironmentSpec("gpu-on-demand-ce", "EC2", ("g5", "g6")),
        ),
        DEMO.queues,
    )
    with BatchEmulator(setup, stop_timeout=2, log_ingestion_delay=LOG_INGESTION_DELAY) as emulator:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", emulator.airflow_connection_uri())
        emulator.stall("gpu-spot-ce")
        ti, spot = Ti(), {"capacity_timeout": 1.0}
        context = {"ti": ti, "task_state_store": Store()}
        candidates = ["A10G:1", "L4:1"]
        deferred = defer(context, accelerator=candidates, command=[sys.executable, "-c", RESULT], spot=spot)
        event = asyncio.run(first_event(trigger_of(deferred)))
        assert resume(deferred, event, context, accelerator=candidates, spot=spot) == {"loss": 0.25}
        jobs = described(emulator)
    assert [(j["jobName"], j["jobQueue"].rsplit("/", 1)[-1]) for j in jobs] == [
        ("train", "gpu-spot"), ("train-r1", "gpu-on-demand"),
    ]  # fmt: skip
    environment = {e["name"]: e["value"] for e in jobs[1]["container"]["environment"]}
    assert environment["AIRFLOW_GPU_ACCELERATOR"] == "L4" and environment["AIRFLOW_GPU_CAPACITY"] == "on-demand"
    assert "L4 (spot capacity) is not offered by its queue; using L4 (on-demand capacity)" in TriggerLog.lines


def test_a_deferral_past_execution_timeout_terminates_the_replacement_too(
    aws_default_connection: BatchEmulator,
) -> None:
    """The worker that fails a timed-out deferral knows only the first job from its state: the
    replacements the trigger submitted are found by name and identity tags and terminated."""
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    reclaim_when_running(emulator, "train")

    async def until_replaced() -> None:
        task = asyncio.create_task(first_event(trigger_of(deferred)))
        await asyncio.to_thread(wait_for, lambda: len(described(emulator)) == 2, 60, "the replacement")
        task.cancel()  # Airflow drops a timed-out trigger without on_kill

    asyncio.run(until_replaced())
    failure = {"error": TriggerFailureReason.TRIGGER_TIMEOUT}
    with pytest.raises(TaskDeferralTimeout):
        operator(command=slow).resume_execution(TRIGGER_FAIL_REPR, failure, context)  # type: ignore[arg-type]
    replacement = wait_for(lambda: (j := described(emulator)[1])["status"] == "FAILED" and j, 60, "the stop")
    assert replacement["jobName"] == "train-r1" and replacement["statusReason"] == KILLED[1]


def test_racing_triggers_keep_the_oldest_job_and_cancel_the_other(aws_default_connection: BatchEmulator) -> None:
    """Two triggerers running the same trigger (apache/airflow#37180) inside ListJobs' consistency
    window both submit: each then keeps the older job of the task try, and the other is cancelled."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    plan = deferred.trigger.serialize()[1]["gpu_spot"]
    batch = emulator.client("batch")
    arguments = {**BatchResubmission.from_argument(plan).arguments("0/on-demand"), "jobName": "train-r1"}
    older, newer = (batch.submit_job(**arguments)["jobId"] for _ in range(2))
    other_try = batch.submit_job(**{**arguments, "tags": {**arguments["tags"], "airflow-gpu/try": "2"}})["jobId"]
    racer = trigger_of(deferred)
    racer.job_id, racer._resubmission = newer, BatchResubmission.from_argument(plan)
    racer._submitted = ("gpu-on-demand", "train-r1")
    racer._converge(asyncio.run(racer._hook()))
    assert racer.job_id == older
    states = {j["jobId"]: j for j in described(emulator)}
    wait_for(lambda: emulator._job(newer).status == "FAILED", 60, "the duplicate to stop")
    assert emulator._job(older).status != "FAILED" and states[other_try]["status"] != "FAILED"


def test_mark_failed_also_stops_a_replacement_the_trigger_has_not_taken_up_yet(
    aws_default_connection: BatchEmulator,
) -> None:
    """Mark Failed while the trigger's SubmitJob is on its way back: the trigger still names the ended
    job, and the new one is found by name and identity tags and terminated too. A worker resubmitting
    for this try follows such a job instead of submitting a second."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]  # a workload that runs until stopped
    deferred = defer(context, command=slow)
    plan = deferred.trigger.serialize()[1]["gpu_spot"]
    batch = emulator.client("batch")
    on_demand = BatchResubmission.from_argument(plan).arguments("0/on-demand")
    in_flight = batch.submit_job(**{**on_demand, "jobName": "train-r1"})["jobId"]
    worker = operator(command=slow)
    worker.spot_run.submissions = 1  # the worker's own resubmission of the same try, on on-demand
    worker.spot_run.move_to(Placement(0, "on-demand"))
    args = worker.submission_arguments(context, worker.spot_run.placement)  # type: ignore[arg-type]
    assert args["jobName"] == "train-r1" and worker._submitted_already(args) == in_flight
    asyncio.run(trigger_of(deferred).on_kill())
    job = wait_for(lambda: (j := described(emulator)[1])["status"] == "FAILED" and j, 60, "the stop")
    assert job["jobId"] == in_flight and job["statusReason"] == KILLED[0]


def test_the_trigger_stops_a_multi_node_job_whose_child_node_lost_its_host_and_the_task_resubmits_it(
    aws_default_connection: BatchEmulator,
) -> None:
    """Deferred: the trigger sees node 1 FAILED while the job runs (its host lost; the main node waits on it) and
    stops the job; the resumed task reads the nodes, takes the end for the node's interruption, submits the job
    again and defers on it, and the next resume returns the result."""
    emulator, ti, store = aws_default_connection, Ti(), Store()
    context = {"ti": ti, "task_state_store": store}
    with pytest.raises(TaskDeferred) as first_deferral:
        multi_node(deferrable=True).execute(context)  # type: ignore[arg-type]
    losing = threading.Thread(target=lambda: lost.append(lose_node_1_when_it_runs(emulator)))
    lost: list[str] = []
    losing.start()
    event = asyncio.run(first_event(trigger_of(first_deferral.value)))
    losing.join(60)
    assert event["status"] == "done" and event["job_status"] == "FAILED"
    with pytest.raises(TaskDeferred) as second_deferral:  # the task submitted the job again, and waits on it
        multi_node(deferrable=True).resume_execution(
            first_deferral.value.method_name, {**(first_deferral.value.kwargs or {}), "event": event}, context
        )  # type: ignore[arg-type]
    event = asyncio.run(first_event(trigger_of(second_deferral.value)))
    assert event["status"] == "done" and event["job_status"] == "SUCCEEDED"
    resumed = multi_node(deferrable=True).resume_execution(
        second_deferral.value.method_name, {**(second_deferral.value.kwargs or {}), "event": event}, context
    )  # type: ignore[arg-type]
    assert resumed == {"loss": 0.25}
    assert_node_loss_resubmitted(emulator, ti, lost[0])

"""Transient AWS errors (issue 25, behaviour 3, AWS Batch): a throttle, a 5xx or a dropped connection on
any Batch or CloudWatch Logs call neither fails a ``GPUBatchOperator`` task nor loses or doubles its job.

The faults are the emulator's (``testing/batch/throttle.py``), answered as AWS answers them: 429
``TooManyRequestsException`` and 500 ``ServerException`` from Batch, 503 from a front end,
``ThrottlingException`` from CloudWatch Logs, and connections that drop before or after the
service acted (a SubmitJob whose job exists but whose answer never came). botocore's backoff and
ours are shortened (``fast_backoff``, ``tests/quick_waits.py``); how many attempts each gets is left as
configured.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.spot.batch import KILLED, ORPHAN_CANCEL_PREFIX, classify_job
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils import batch_retries
from tests.operators import test_batch_operator_deferred as deferred_tests
from tests.operators.task_context import Store, Ti
from tests.operators.test_batch_operator_runs import RESULT, described, operator

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]


def test_a_submit_whose_answer_was_lost_is_followed_not_submitted_again(aws_default_connection: BatchEmulator) -> None:
    """Batch created the job, then the connection dropped before its answer arrived. SubmitJob has no
    idempotency token: sent again (as botocore's own retry does), it makes a second job of the try."""
    emulator = aws_default_connection
    lost = emulator.fail("SubmitJob", "lost")
    assert operator().execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}
    assert lost.hits == 1
    (job,) = described(emulator)
    assert job["status"] == "SUCCEEDED" and job["jobName"] == "train"


def test_a_first_submission_listed_past_the_lookup_is_kept_and_the_second_terminated(
    aws_default_connection: BatchEmulator, tmp_path: Path
) -> None:
    """SubmitJob's answer is lost and ListJobs lists the job later than the look-up looks (its pauses are
    cut short here): the job is sent again, and two GPU jobs of one try run. The operator, following the
    second, finds both once listed: it keeps the first created, follows it, and terminates the other
    with a log line. Its result is the first job's.

    The jobs run until the second has been stopped (a release file, at most 60 s): both are still
    running when the operator finds them, however loaded the machine, and none waits longer."""
    from airflow_gpu.hooks.batch_submit import DUPLICATE_REASON

    emulator = aws_default_connection
    emulator.list_lag(3)
    lost = emulator.fail("SubmitJob", "lost")
    release = tmp_path / "release"
    held = (
        "import os, time\nend = time.monotonic() + 60\n"
        f"while not os.path.exists({str(release)!r}) and time.monotonic() < end:\n    time.sleep(0.05)\n"
    )
    slow = [sys.executable, "-c", held + RESULT]

    def release_once_the_second_is_stopped() -> None:
        end = time.monotonic() + 60
        while not release.exists() and time.monotonic() < end:
            jobs = described(emulator)
            if len(jobs) == 2 and jobs[1]["status"] in ("FAILED", "SUCCEEDED"):
                break
            time.sleep(0.2)
        release.touch()

    releaser = threading.Thread(target=release_once_the_second_is_stopped, daemon=True)
    releaser.start()
    try:
        assert operator(command=slow).execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}
    finally:
        emulator.list_lag(0)
        release.touch()
        releaser.join(5)
    assert lost.hits == 1
    first, second = wait_for(lambda: (js := described(emulator))[1]["status"] == "FAILED" and js, 30, "the stop")
    assert first["jobName"] == second["jobName"] == "train"
    assert first["status"] == "SUCCEEDED"
    assert (second["status"], second["statusReason"]) == ("FAILED", DUPLICATE_REASON)


def test_a_late_job_of_an_earlier_submission_is_stopped_never_followed_once_the_try_moved_on(
    aws_default_connection: BatchEmulator,
) -> None:
    """A submission sent again after its lost answer is watched for its first job, listed late. When the job the
    try followed is interrupted and the next one (a later name) submitted within the watch, a late job of the
    earlier name is a duplicate to stop, not the job to follow: the twenty-fourth soak followed an ended job
    again in place of the running one, counted its interruption twice more and left two later jobs running."""
    from airflow_gpu.hooks.batch_submit import DUPLICATE_REASON

    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    sleeping = [sys.executable, "-c", "import signal; signal.pause()"]  # jobs that run until stopped
    late, followed = operator(command=sleeping), operator(command=sleeping)
    late.submit_job(context)  # type: ignore[arg-type]  # the first send: its answer lost, listed late
    followed.submit_job(context)  # type: ignore[arg-type]  # sent again: the job the try followed
    identity = {k: v for k, v in described(emulator)[0]["tags"].items() if k.startswith("airflow-gpu/")}
    op = operator(command=sleeping)
    op.job_id = "the-next-submission"  # the job of the try's next submission, under the next name
    op._duplicate_watch = ("gpu-spot", "train", identity, time.monotonic() + 60)
    op._watched_job, op._duplicates_checked = str(followed.job_id), 0.0
    op._stop_duplicates(context)  # type: ignore[arg-type]
    assert op.job_id == "the-next-submission"  # still the later job
    wait_for(lambda: all(j["status"] == "FAILED" for j in described(emulator)), 60, "both stopped")
    assert [(j["jobName"], j["statusReason"]) for j in described(emulator)] == [("train", DUPLICATE_REASON)] * 2


def test_a_burst_of_throttles_server_errors_and_resets_on_every_call_is_ridden_out(
    aws_default_connection: BatchEmulator,
) -> None:
    """Each call the task makes meets more failures in a row than botocore's default retries absorb (5
    attempts): the task still succeeds with one job and reads its result from CloudWatch Logs."""
    emulator = aws_default_connection
    faults = [
        emulator.fail("DescribeJobQueues", "throttle", times=6),
        emulator.fail("RegisterJobDefinition", "server", times=6),
        emulator.fail("SubmitJob", "throttle", times=6),
        emulator.fail("SubmitJob", "server", times=2),  # may have been acted on: looked up before resending
        emulator.fail("DescribeJobs", "unavailable", times=8),
        emulator.fail("DescribeJobs", "reset", times=4),
        emulator.fail("GetLogEvents", "throttle", times=12),
    ]
    assert operator().execute({"ti": Ti(), "task_state_store": Store()}) == {"loss": 0.25}
    assert [f.hits for f in faults] == [6, 6, 6, 2, 8, 4, 12]
    (job,) = described(emulator)
    assert job["status"] == "SUCCEEDED"


def test_mark_failed_stops_the_job_through_a_burst_of_server_errors(aws_default_connection: BatchEmulator) -> None:
    """``on_kill`` must stop the job whatever TerminateJob answers first: left running, it is billed."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    op = operator(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    op.submit_job(context)  # type: ignore[arg-type]
    wait_for(lambda: described(emulator)[0]["status"] == "RUNNING", timeout=60, what="the job to run")
    failed = emulator.fail("TerminateJob", "server", times=7)
    op.on_kill()
    assert failed.hits == 7
    job = wait_for(lambda: (j := described(emulator)[0])["status"] == "FAILED" and j, 60, "the job to stop")
    assert job["statusReason"] == KILLED[0]


def test_a_deferred_task_rides_out_describe_errors_and_a_lost_resubmission(
    aws_default_connection: BatchEmulator, tmp_path: Path
) -> None:
    """In the triggerer: DescribeJobs fails in a long burst (more rounds than the trigger's ``max_errors``
    would forgive at botocore's default), then the trigger's SubmitJob of the on-demand replacement
    loses its answer. The task ends with one replacement, not two, and its result."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    gate = tmp_path / "gate"
    command = deferred_tests.gated_result(gate)
    deferred = deferred_tests.defer(context, command=command)
    lost = emulator.fail("SubmitJob", "lost")  # the next SubmitJob is the trigger's
    reclaimer = deferred_tests.reclaim_when_running(emulator, "train", after_line="checkpoint 1", then_open=gate)

    async def run_trigger() -> dict[str, Any]:
        trigger = asyncio.create_task(deferred_tests.first_event(deferred_tests.trigger_of(deferred)))
        await asyncio.to_thread(reclaimer.reclaimed.wait, 60)  # it reads jobs too: the burst is the trigger's
        described_badly.append(emulator.fail("DescribeJobs", "server", times=30))
        return await trigger

    described_badly: list[Any] = []
    event = asyncio.run(run_trigger())
    reclaimer.finished()
    assert event["status"] == "done" and event["job_status"] == "SUCCEEDED"
    assert described_badly[0].hits == 30 and lost.hits == 1
    assert deferred_tests.resume(deferred, event, context, command=command) == {"loss": 0.25}
    jobs: list[dict[str, Any]] = described(emulator)
    assert [(j["jobName"], j["status"]) for j in jobs] == [("train", "FAILED"), ("train-r1", "SUCCEEDED")]


@pytest.mark.parametrize(("max_tries", "stopped"), [(0, True), (1, False)])
def test_an_outage_past_every_retry_stops_the_job_unless_a_next_try_takes_it_over(
    aws_default_connection: BatchEmulator, max_tries: int, stopped: bool
) -> None:
    """DescribeJobs fails for longer than botocore's attempts and our rounds: the error leaves ``execute``.
    On the task's last try the job is terminated (nobody would read it); with a try to come it runs on,
    saved, for that try to take over."""
    from airflow.sdk.exceptions import AirflowFailException

    emulator, store = aws_default_connection, Store()
    op = operator(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    context = {"ti": Ti(max_tries=max_tries), "task_state_store": store}
    op.submit_job(context)  # type: ignore[arg-type]
    job = emulator._job(str(op.job_id))
    wait_for(lambda: job.status == "RUNNING", timeout=60, what="the job to run")
    emulator.fail("DescribeJobs", "server", times=10_000)
    with pytest.raises(Exception, match="ServerException") as raised:
        op.execute(context)  # type: ignore[arg-type]
    assert not isinstance(raised.value, AirflowFailException)
    if stopped:
        wait_for(lambda: job.status == "FAILED", timeout=60, what="the job to stop")
        assert job.job_stopped_reason.startswith(KILLED[0]) and store["airflow_gpu_batch_job"]["open"] is False
    else:
        assert job.status == "RUNNING" and store["airflow_gpu_batch_job"]["open"] is True
        emulator.client("batch").terminate_job(jobId=job.job_id, reason="test over")


def test_mark_failed_while_submit_job_is_in_flight_stops_the_job_it_creates(
    aws_default_connection: BatchEmulator,
) -> None:
    """On a worker: Mark Failed (``on_kill``, from the task runner's SIGTERM handler) while the task's
    SubmitJob is on its way, Batch creating the job at once and answering 3 s later. ``on_kill`` has no
    job id to terminate yet; the submission hears of the kill when the answer lands, terminates that job
    (a ``KILLED`` reason: no later try takes it over) and the task ends instead of following it."""
    from airflow.sdk.exceptions import AirflowException

    emulator = aws_default_connection
    op = operator(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    held = emulator.slow("SubmitJob", 3)
    raised: list[BaseException] = []

    def execute() -> None:
        try:
            op.execute({"ti": Ti(), "task_state_store": Store()})  # type: ignore[arg-type]
        except BaseException as error:
            raised.append(error)

    task = threading.Thread(target=execute, daemon=True)
    task.start()
    try:
        wait_for(lambda: held.hits == 1, 60, "the SubmitJob to reach Batch")
        op.on_kill()
        task.join(20)
        assert not task.is_alive(), "the task followed the job its SubmitJob created after the kill"
        (job,) = described(emulator)
        job = wait_for(lambda: (j := described(emulator)[0])["status"] == "FAILED" and j, 20, "the job to stop")
    finally:  # a failed test leaves nothing running for the next
        for running in described(emulator):
            emulator.client("batch").terminate_job(jobId=running["jobId"], reason="test over")
        task.join(60)
    assert job["statusReason"].startswith(KILLED[0]) and "being killed" in job["statusReason"]
    assert len(raised) == 1 and isinstance(raised[0], AirflowException) and "killed" in str(raised[0])


def test_a_deferred_task_whose_first_submission_is_listed_late_stops_the_second_as_listed_late(
    aws_default_connection: BatchEmulator,
) -> None:
    """The worker's SubmitJob loses its answer and ListJobs lists the job past the look-up: the worker
    sends it again and defers, and the trigger watches for the first job (``watch_duplicates``). Once
    both are listed it follows the first and terminates the second, with the reason of that cause
    (``batch_submit``: listed late), not that of two triggerers racing (``batch_resubmission``)."""
    from airflow_gpu.hooks.batch_submit import DUPLICATE_REASON

    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    emulator.list_lag(3)
    lost = emulator.fail("SubmitJob", "lost")
    try:
        deferred = deferred_tests.defer(context)
        assert deferred.trigger.serialize()[1]["watch_duplicates"]
        event = asyncio.run(deferred_tests.first_event(deferred_tests.trigger_of(deferred)))
    finally:
        emulator.list_lag(0)
    assert lost.hits == 1
    first, second = wait_for(lambda: (js := described(emulator))[1]["status"] == "FAILED" and js, 30, "the stop")
    assert (event["status"], event["job_id"], event["job_status"]) == ("done", first["jobId"], "SUCCEEDED")
    assert (second["status"], second["statusReason"]) == ("FAILED", DUPLICATE_REASON)


def orphaned_try_of(op: Any, store: Store, max_tries: int, when: str, emulator: BatchEmulator) -> threading.Thread:
    """Run try 1 in a thread, and play its supervisor's death once its job is ``when`` (RUNNABLE, RUNNING): the
    recorded parent pid changes (``_supervisor``), as it does when a Celery worker is SIGKILLed and the task
    process lives on. The thread ends with the try; what it raised is in ``op.raised``."""
    op.raised = []

    def execute() -> None:
        try:
            op.execute({"ti": Ti(max_tries=max_tries), "task_state_store": store})
        except BaseException as error:
            op.raised.append(error)

    task = threading.Thread(target=execute, daemon=True)
    task.start()
    wait_for(lambda: op.job_id, 60, "the job submitted")
    job = emulator._job(str(op.job_id))
    wait_for(lambda: job.status == when, timeout=60, what=f"the job {when}")
    op._supervisor = -1  # another parent now: the supervisor is gone
    return task


@pytest.mark.parametrize(("max_tries", "stopped"), [(0, True), (1, False)])
def test_a_try_whose_supervisor_died_stops_acting_and_terminates_its_job_only_on_its_last_try(
    aws_default_connection: BatchEmulator, max_tries: int, stopped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fourth soak: a Celery worker was SIGKILLed, and the task process lived on (Airflow's task runner has
    a process group of its own), waiting on its job, ready to replace it after a reclaim beside the retry's
    (``orphaned_try``). It now stops at its next poll: on the task's last try the job is terminated (nobody
    would read it), else left for the retry to take over (here none comes within the patience: the job runs,
    so it is left to ``airflow-gpu reap``); no job is submitted again."""
    from airflow_gpu.operators.orphaned_try import OrphanedTry

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "1")
    emulator, store = aws_default_connection, Store()
    # the workload: a job that runs on (a minute) while the test acts on it, not a wait of the test's
    op: Any = operator(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    task = orphaned_try_of(op, store, max_tries, "RUNNING", emulator)
    task.join(60)
    assert not task.is_alive() and isinstance(op.raised[0], OrphanedTry)
    job = emulator._job(str(op.job_id))
    if stopped:
        wait_for(lambda: job.status == "FAILED", timeout=60, what="the job to stop")
        assert job.job_stopped_reason.startswith(KILLED[0])
    else:
        assert job.status == "RUNNING" and store["airflow_gpu_batch_job"]["open"] is True
        emulator.client("batch").terminate_job(jobId=job.job_id, reason="test over")
    assert len(described(emulator)) == 1  # nothing submitted again


def test_an_orphan_cancels_the_job_left_for_a_retry_that_never_came_if_it_never_started(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fourth soak's live orphan, on Batch: the worker died while the job waited for an instance, then the
    task was marked success, so no retry came. Past its patience the orphan cancels the job, which would
    otherwise start later for nobody (nothing ran: nothing is lost)."""
    from airflow_gpu.operators import orphaned_try

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "1")
    monkeypatch.setattr(orphaned_try, "LOOK_SECONDS", 0.2)
    emulator, store = aws_default_connection, Store()
    emulator.stall("gpu-spot-ce")
    op: Any = operator(spot={"capacity_timeout": 600})
    task = orphaned_try_of(op, store, 1, "RUNNABLE", emulator)
    task.join(60)
    assert not task.is_alive() and isinstance(op.raised[0], orphaned_try.OrphanedTry)
    (job,) = wait_for(lambda: (js := described(emulator))[0]["status"] == "FAILED" and js, 30, "the job cancelled")
    assert job["statusReason"].startswith(ORPHAN_CANCEL_PREFIX) and not job.get("attempts")  # it never ran
    # A retry that follows it after all (its mark lost) submits the work again: nothing of it ran.
    assert classify_job(job).interrupted


def test_an_orphan_leaves_its_job_to_the_retry_that_tags_it_taken_over(
    aws_default_connection: BatchEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orphan watches the job it left (``orphaned_try.linger``): the retry reattaches and tags the job with
    its mark (``TagResource``), the orphan leaves long before its patience, and the retry reads the job's
    result: one job, run once."""
    from airflow_gpu.operators import orphaned_try

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "600")
    monkeypatch.setattr(orphaned_try, "LOOK_SECONDS", 0.2)
    emulator, store, hold = aws_default_connection, Store(), tmp_path / "release"
    # the workload runs until the test creates ``hold`` (a file it watches), then prints its result
    held = f"import pathlib, time\nwhile not pathlib.Path({str(hold)!r}).exists(): time.sleep(0.1)\n{RESULT}"
    first: Any = operator(command=[sys.executable, "-c", held])
    orphan = orphaned_try_of(first, store, 1, "RUNNING", emulator)
    retry: Any = operator(command=[sys.executable, "-c", held])
    result: list[Any] = []
    taking = threading.Thread(
        target=lambda: result.append(retry.execute({"ti": Ti(2, max_tries=1), "task_state_store": store})),
        daemon=True,
    )
    taking.start()
    orphan.join(60)
    assert not orphan.is_alive() and isinstance(first.raised[0], orphaned_try.OrphanedTry)
    (job,) = described(emulator)
    assert job["status"] == "RUNNING" and job["tags"][orphaned_try.TAKEN_ANNOTATION] == retry._taker
    hold.touch()
    taking.join(120)
    assert result == [{"loss": 0.25}] and len(described(emulator)) == 1


def test_a_try_whose_supervisor_died_during_a_throttle_pause_submits_nothing(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twelfth soak (seed 831782228): SubmitJob was throttled, and the Celery worker was SIGKILLed during the
    pause before the next send; the task process lived on and sent it. Its job ran and succeeded, but a try
    without its supervisor saves nothing: the retry knew no job and submitted another, a start after a
    success. A try whose supervisor is gone now sends nothing more, and ends (``OrphanedTry``)."""
    from airflow_gpu.operators.orphaned_try import OrphanedTry

    emulator, store = aws_default_connection, Store()
    emulator.fail("SubmitJob", "throttle", times=1)
    op: Any = operator()
    paused = threading.Event()
    real_sleep = batch_retries.sleep

    def supervisor_dies_in_the_pause(seconds: float) -> None:
        op._supervisor = -1  # another parent now: the worker was SIGKILLed, this process lives on
        paused.set()
        real_sleep(min(seconds, 0.1))

    monkeypatch.setattr(batch_retries, "sleep", supervisor_dies_in_the_pause)
    with pytest.raises(OrphanedTry):
        op.execute({"ti": Ti(max_tries=1), "task_state_store": store})
    assert paused.is_set() and described(emulator) == []  # nothing sent after the pause


def _orphaned_submission(emulator: BatchEmulator, monkeypatch: pytest.MonkeyPatch, store: Store, patience: str) -> Any:
    """Try 1: SubmitJob's answer is lost and the worker dies in the pause before the look-up (the orphan's
    patience as given); the try, ended with ``OrphanedTry``."""
    from airflow_gpu.operators.orphaned_try import OrphanedTry

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", patience)
    emulator.fail("SubmitJob", "lost", times=1)
    op: Any = operator()
    real_sleep = batch_retries.sleep

    def supervisor_dies_in_the_pause(seconds: float) -> None:
        op._supervisor = -1  # another parent now: the worker was SIGKILLed, this process lives on
        real_sleep(min(seconds, 0.1))

    monkeypatch.setattr(batch_retries, "sleep", supervisor_dies_in_the_pause)
    with pytest.raises(OrphanedTry):
        op.execute({"ti": Ti(max_tries=1), "task_state_store": store})
    monkeypatch.setattr(batch_retries, "sleep", real_sleep)
    return op


def test_a_job_an_orphaned_submission_found_is_left_to_the_retry_not_terminated(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SubmitJob's answer was lost and the worker died during the pause before the look-up: the look-up finds the
    job, which a retry may take over (by its name and try tags), so the orphan leaves it as it leaves any work
    (``orphaned_try``) instead of terminating it as killed; its log lines, which would fail, are dropped."""
    op = _orphaned_submission(aws_default_connection, monkeypatch, Store(), "1")
    (job,) = described(aws_default_connection)
    assert op.job_id == job["jobId"]  # found, and handed to the orphan's own handling of it
    assert not str(job.get("statusReason") or "").startswith(KILLED[0])  # not terminated as a killed task's


def _orphaned_with_an_unsaved_job(emulator: BatchEmulator, monkeypatch: pytest.MonkeyPatch, store: Store) -> dict:
    """Try 1 orphaned as above; the job it made runs to its end unsaved (the orphan watches it and leaves)."""
    _orphaned_submission(emulator, monkeypatch, store, "600")
    (job,) = described(emulator)
    wait_for(lambda: described(emulator)[0]["status"] in ("SUCCEEDED", "FAILED"), 60, "the unsaved job to end")
    assert "airflow_gpu_batch_job" not in store  # nothing saved: the retry cannot know the job that way
    return dict(job)


def test_a_retry_takes_over_the_job_its_previous_try_made_but_never_saved(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twenty-sixth soak (seed 1556083924, ``soak_fanout_batch`` shard 49): try 1's SubmitJob met a 500 after
    Batch had made the job, and its worker was killed a second later; the job succeeded, and try 2, with no saved
    run, submitted the shard again. The retry now finds the previous try's first job by its name and tags and
    reads its success: one job in all."""
    emulator, store = aws_default_connection, Store()
    job = _orphaned_with_an_unsaved_job(emulator, monkeypatch, store)
    retry = {"ti": Ti(try_number=2, max_tries=1), "task_state_store": store}
    assert operator().execute(retry) == {"loss": 0.25}
    assert [j["jobId"] for j in described(emulator)] == [job["jobId"]]  # not submitted again
    assert retry["ti"].xcom["batch_job_id"] == job["jobId"]


def test_a_job_its_try_judged_is_not_taken_over_by_a_later_try(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job the saved run names was judged by its try (a Clear after that try's success asks for a new run):
    the next try submits its own."""
    emulator, store = aws_default_connection, Store()
    assert operator().execute({"ti": Ti(max_tries=1), "task_state_store": store}) == {"loss": 0.25}
    cleared = {"ti": Ti(try_number=2, max_tries=3), "task_state_store": store}
    assert operator().execute(cleared) == {"loss": 0.25}
    assert len(described(emulator)) == 2


def test_a_second_unsaved_job_of_the_previous_try_is_stopped_as_a_duplicate(
    aws_default_connection: BatchEmulator,
) -> None:
    """Try 1 sent its first job twice (a lost answer, listed late) and saved neither: the retry takes the first
    created over and terminates the other, which would run on for nobody, as a duplicate."""
    from airflow_gpu.hooks.batch_submit import DUPLICATE_REASON

    emulator, first_try = aws_default_connection, {"ti": Ti(max_tries=1), "task_state_store": Store()}
    operator().submit_job(first_try)  # type: ignore[arg-type]  # its answer lost: nothing saved for the retry
    operator(command=[sys.executable, "-c", "import signal; signal.pause()"]).submit_job(first_try)  # type: ignore[arg-type]
    first = described(emulator)[0]
    retry = {"ti": Ti(try_number=2, max_tries=1), "task_state_store": Store()}
    assert operator().execute(retry) == {"loss": 0.25}
    assert retry["ti"].xcom["batch_job_id"] == first["jobId"]
    wait_for(lambda: described(emulator)[1]["status"] == "FAILED", 60, "the duplicate stopped")
    assert described(emulator)[1]["statusReason"] == DUPLICATE_REASON and len(described(emulator)) == 2

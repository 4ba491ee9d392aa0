"""``GPUBatchHook`` against the Batch emulator through Airflow's ``aws_default`` connection.

One emulator serves the module (each test names its own definitions); ``aws_default`` points at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.hooks.batch import SPEC_HASH_TAG, GPUBatchHook
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for


@pytest.fixture(scope="module")
def aws_default_connection() -> Iterator[BatchEmulator]:
    with BatchEmulator(stop_timeout=5) as emulator, pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_AWS_DEFAULT", emulator.airflow_connection_uri())
        yield emulator


def definition(command: list[str]) -> dict[str, Any]:
    return {
        "type": "container",
        "containerProperties": {
            "image": "busybox",
            "command": command,
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}],
        },
    }


def test_a_job_definition_is_registered_once_per_content(aws_default_connection: BatchEmulator) -> None:
    hook = GPUBatchHook(aws_conn_id="aws_default")
    first = hook.register_job_definition_once("train", definition(["echo", "a"]))
    assert hook.register_job_definition_once("train", definition(["echo", "a"])) == first  # parsed again
    changed = hook.register_job_definition_once("train", definition(["echo", "b"]))
    assert changed != first and changed.endswith(":2")
    assert hook.register_job_definition_once("train", definition(["echo", "a"])) == first
    revisions = hook.api.describe_job_definitions(jobDefinitionName="train")["jobDefinitions"]
    assert len(revisions) == 2 and all(SPEC_HASH_TAG in r["tags"] for r in revisions)


def test_describe_jobs_batched_takes_100_per_call(aws_default_connection: BatchEmulator) -> None:
    """230 ids, a repeat and an unknown one: three calls of at most 100 (DescribeJobs' limit), and
    every job found wherever its batch; unknown ids are left out, as DescribeJobs leaves them."""
    hook = GPUBatchHook(aws_conn_id="aws_default")
    hook.register_job_definition_once("noop", definition(["true"]))
    real = [
        hook.api.submit_job(jobName=f"j{i}", jobQueue="gpu-on-demand", jobDefinition="noop")["jobId"] for i in range(3)
    ]
    ids = [f"00000000-0000-0000-0000-{i:012d}" for i in range(227)]
    for position, job_id in zip((0, 150, 226), real, strict=True):  # one in each call's batch
        ids.insert(position, job_id)
    calls: list[int] = []
    original = hook.api.describe_jobs

    def counting(**kwargs: Any) -> Any:
        calls.append(len(kwargs["jobs"]))
        return original(**kwargs)

    hook.api.describe_jobs = counting
    found = hook.describe_jobs_batched([*ids, real[0], "not-a-job"])
    assert set(found) == set(real) and calls == [100, 100, 31]


def test_queue_offers(aws_default_connection: BatchEmulator) -> None:
    hook = GPUBatchHook(aws_conn_id="aws_default")
    spot = hook.queue_offers("gpu-spot")
    assert spot.capacity == "spot" and hook.queue_offers("gpu-on-demand").capacity == "on-demand"
    assert spot.describe() == "queue gpu-spot (spot) offers g5 (A10G), g6 (L4), p4d (A100), p5 (H100)"
    assert spot.can_run(Accelerator.parse("H100:8")) and spot.can_run(Accelerator.parse("A10G:4"))
    assert not spot.can_run(Accelerator.parse("B200:8")) and not spot.can_run(Accelerator.parse("L40S"))
    assert not spot.can_run(Accelerator.parse("A100-80GB:8"))  # p4d carries the 40 GB A100


def test_a_job_still_runnable_after_its_cancel_is_terminated_before_the_run_moves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CancelJob on a RUNNABLE job behind the head of its queue (earlier API references: it "remains
    in RUNNABLE until it reaches the head of the job queue"). Taken as cancelled after the timeout,
    it must not start when capacity comes back, with nobody following it: TerminateJob stops it."""
    with BatchEmulator(stop_timeout=2, cancel_at_head=True) as emulator:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", emulator.airflow_connection_uri())
        hook = GPUBatchHook(aws_conn_id="aws_default")
        arn = hook.register_job_definition_once("quick", definition(["true"]))
        emulator.stall("gpu-spot-ce")
        head, behind = (
            hook.api.submit_job(jobName=name, jobQueue="gpu-spot", jobDefinition=arn)["jobId"] for name in ("a", "b")
        )
        wait_for(lambda: emulator._job(behind).status == "RUNNABLE", 30, "the job to be RUNNABLE")
        ended = hook.cancel_runnable(behind, "no capacity", interval=0.2, timeout=1)
        assert ended["status"] == "FAILED" and ended["statusReason"] == "no capacity"
        emulator.release("gpu-spot-ce")
        wait_for(lambda: emulator._job(head).status == "SUCCEEDED", 30, "the head job to run")
        job = wait_for(lambda: (j := emulator._job(behind)).status in ("SUCCEEDED", "FAILED") and j, 30, "its end")
        assert job.status == "FAILED" and not job.attempts  # it never started


@pytest.mark.slow  # waits out ListJobs' 8 s lag on the emulator's clock: make test only
def test_a_lost_submission_listed_late_is_found_not_submitted_again(aws_default_connection: BatchEmulator) -> None:
    """SubmitJob created the job, its answer was lost, and ListJobs (eventually consistent) lists the job
    only 8 s later. Looked up for three reads 2 s apart, it was sent again: two GPU jobs for one try.
    Looked up over a minute of reads with backoff (``batch_submit``), it is found and followed."""
    from airflow_gpu.triggers.batch_resubmission import oldest_of_try

    emulator = aws_default_connection
    hook = GPUBatchHook(aws_conn_id="aws_default")
    hook.register_job_definition_once("listed-late", definition(["true"]))
    identity = {"airflow-gpu/dag": "d", "airflow-gpu/task": "late", "airflow-gpu/run": "r", "airflow-gpu/try": "1"}
    args = {"jobName": "listed-late", "jobQueue": "gpu-on-demand", "jobDefinition": "listed-late", "tags": identity}
    emulator.list_lag(8)
    lost = emulator.fail("SubmitJob", "lost")
    try:
        submitted = hook.submit_job_once(args, lambda jobs: oldest_of_try(jobs, identity))
    finally:
        emulator.list_lag(0)
    named = [job.job_id for job in emulator.jobs() if job.job_name == "listed-late"]
    assert lost.hits == 1
    assert len(named) == 1, f"the job was submitted again: {named}"
    assert (submitted.job_id, submitted.adopted, submitted.resent) == (named[0], True, False)


def test_the_lookup_lasts_a_minute_with_backoff() -> None:
    """The documented window (``batch_submit``): eight reads over 60 s, pauses doubling up to 15 s."""
    from airflow_gpu.hooks import batch_submit

    assert batch_submit.lookup_waits() == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert sum(batch_submit.lookup_waits()) == batch_submit.LOOKUP_WINDOW == 60.0


def submission(name: str) -> tuple[dict[str, Any], Any]:
    """SubmitJob's arguments for a job of this try named ``name``, and the try's ``keep``."""
    from airflow_gpu.triggers.batch_resubmission import oldest_of_try

    identity = {"airflow-gpu/dag": "d", "airflow-gpu/task": name, "airflow-gpu/run": "r", "airflow-gpu/try": "1"}
    args = {"jobName": name, "jobQueue": "gpu-on-demand", "jobDefinition": "killed-submit", "tags": identity}
    return args, lambda jobs: oldest_of_try(jobs, identity)


def test_a_submission_killed_during_its_pause_sends_no_further_submit_job(
    aws_default_connection: BatchEmulator,
) -> None:
    """SubmitJob is throttled (Batch did not act), and the task is killed during the pause before it would
    be sent again: nothing more is sent, the pause ends early, and the caller hears it was withdrawn."""
    import time

    from airflow_gpu.hooks.batch_submit import Withdrawn

    emulator = aws_default_connection
    hook = GPUBatchHook(aws_conn_id="aws_default")
    hook.register_job_definition_once("killed-submit", definition(["sleep", "60"]))
    args, keep = submission("killed-in-pause")
    throttled = emulator.fail("SubmitJob", "throttle")
    assert hook._submit_api is not None  # built before the clock starts
    started = time.monotonic()
    with pytest.raises(Withdrawn) as withdrawn:
        hook.submit_job_once(args, keep, stop=lambda: throttled.hits >= 1)  # killed once the first was sent
    assert withdrawn.value.job_id is None and "killed-in-pause" in str(withdrawn.value)
    assert throttled.hits == 1 and not [j for j in emulator.jobs() if j.job_name == "killed-in-pause"]
    assert time.monotonic() - started < 1.5  # the pause before the next try (1-2 s) was cut short


def test_a_submission_killed_after_a_lost_answer_terminates_the_job_that_answer_created(
    aws_default_connection: BatchEmulator,
) -> None:
    """SubmitJob created the job, its answer was lost, and the task is killed before the look-up: the job
    is looked up but not sent again, and the job found is terminated with a reason naming the kill (one
    a later try does not take over), instead of being adopted and left running."""
    from airflow_gpu.hooks.batch_submit import Withdrawn
    from airflow_gpu.spot.batch import KILLED

    emulator = aws_default_connection
    hook = GPUBatchHook(aws_conn_id="aws_default")
    hook.register_job_definition_once("killed-submit", definition(["sleep", "60"]))
    args, keep = submission("killed-lost")
    lost = emulator.fail("SubmitJob", "lost")
    with pytest.raises(Withdrawn) as withdrawn:
        hook.submit_job_once(args, keep, stop=lambda: lost.hits >= 1)
    (job,) = [j for j in emulator.jobs() if j.job_name == "killed-lost"]
    assert (withdrawn.value.job_id, withdrawn.value.terminated) == (job.job_id, True)
    wait_for(lambda: job.status == "FAILED", timeout=30, what="the job to stop")
    assert job.job_stopped_reason.startswith(KILLED[0]) and "being killed" in job.job_stopped_reason


def test_a_throttled_resend_after_a_lookup_is_not_looked_up_again(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the soak (docs/soak.rst): SubmitJob answered 500 (it may have created the job), the
    look-up found nothing, and the resend was throttled twice. A throttle means Batch did not act, so
    one look-up is all the 500 needs; each throttle was followed by a minute-long look-up of its own,
    and one job took minutes to submit. The job sent after the look-up stays ``resent`` (its follower
    watches for the first job listed late)."""
    from airflow_gpu.hooks import batch_submit
    from airflow_gpu.utils import batch_retries

    emulator = aws_default_connection
    hook = GPUBatchHook(aws_conn_id="aws_default")
    hook.register_job_definition_once("killed-submit", definition(["true"]))
    args, keep = submission("throttled-after-lookup")
    lookups: list[str] = []
    monkeypatch.setattr(batch_submit, "find_submitted", lambda hook, args, *rest: lookups.append(args["jobName"]))
    monkeypatch.setattr(batch_retries, "sleep", lambda seconds: None)
    server = emulator.fail("SubmitJob", "server")
    throttled = emulator.fail("SubmitJob", "throttle", times=2)
    submitted = hook.submit_job_once(args, keep)
    assert (server.hits, throttled.hits) == (1, 2)
    assert lookups == ["throttled-after-lookup"]  # once, after the 500; none after the throttles
    named = [j.job_id for j in emulator.jobs() if j.job_name == "throttled-after-lookup"]
    assert named == [submitted.job_id] and submitted.resent and not submitted.adopted

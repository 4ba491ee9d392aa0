"""Reading AWS Batch attempts with the shared outcomes, and the retry strategy the policy asks for.

The job shapes are DescribeJobs answers as the Batch documentation shows them (DESIGN.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.spot.batch import (
    NODE_FAILED_PREFIX,
    CapacityClock,
    attempts_ended_at,
    capacity_cancel_reason,
    child_node_ids,
    classify_attempt,
    classify_attempts,
    classify_job,
    failed_child,
    missing_program,
    retry_strategy,
)
from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.testing.batch.retry import action_after_attempt

RECLAIM = "Host EC2 (instance i-0b9c3f1e2a7d4c5e6) terminated."


def attempt(status_reason: str, exit_code: int | None = None, reason: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"logStreamName": "train/default/abc"}
    if exit_code is not None:
        container["exitCode"] = exit_code
    if reason is not None:
        container["reason"] = reason
    return {"container": container, "statusReason": status_reason, "startedAt": 1, "stoppedAt": 2}


@pytest.mark.parametrize(
    ("shape", "outcome", "reason", "interrupted"),
    [
        (attempt(RECLAIM, 143), Outcome.PREEMPTED, "SpotReclaim", True),
        (attempt(RECLAIM), Outcome.PREEMPTED, "SpotReclaim", True),  # the host vanished: no exit code
        (attempt("Essential container in task exited", 0), Outcome.SUCCEEDED, "Succeeded", False),
        (attempt("Essential container in task exited", 3), Outcome.APPLICATION, "Error", False),
        (
            attempt("Essential container in task exited", 137, "OutOfMemoryError: Container killed: memory"),
            Outcome.APPLICATION, "OutOfMemoryError", False,
        ),
        (
            attempt("Task failed to start", reason="CannotPullContainerError: pull access denied for nvcr.io/x"),
            Outcome.INFRASTRUCTURE, "CannotPullContainerError", False,
        ),
        (
            attempt("Task failed to start", reason="ResourceInitializationError: failed to create new container"),
            Outcome.INFRASTRUCTURE, "ResourceInitializationError", True,
        ),
        (attempt("Job attempt duration exceeded timeout", 137), Outcome.APPLICATION, "Error", False),
    ],
)  # fmt: skip
def test_attempts(shape: dict[str, Any], outcome: Outcome, reason: str, interrupted: bool) -> None:
    got = classify_attempt(shape)
    assert (got.outcome, got.reason, got.interrupted) == (outcome, reason, interrupted)


#: Container reasons of attempts that never started, as ECS/containerd word them (the ECS "Stopped tasks
#: error codes" and "CannotPullContainer task errors" pages): the job's own configuration, which no
#: other host fixes, against what another host or a later pull may well not meet.
START_FAILURES = [
    (
        "CannotStartContainerError: Error response from daemon: failed to initialize logging driver: failed to "
        "create Cloudwatch log stream: ResourceNotFoundException: The specified log group does not exist.",
        False,
    ),
    (
        "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval "
        "failed: unable to retrieve secret from asm: service call has been retried 1 time(s): "
        "ResourceNotFoundException: Secrets Manager can't find the specified secret.",
        False,
    ),
    (
        "ResourceInitializationError: unable to pull secrets or registry auth: execution resource retrieval "
        "failed: unable to retrieve secret from asm: service call has been retried 1 time(s): AccessDeniedException",
        False,
    ),
    (
        'CannotPullContainerError: ref pull has been retried 1 time(s): failed to resolve reference "123456789012'
        '.dkr.ecr.us-east-1.amazonaws.com/train:v9": 123456789012.dkr.ecr.us-east-1.amazonaws.com/train:v9: not found',
        False,
    ),
    ("CannotPullContainerError: invalid reference format", False),
    (  # a distroless image: no shell at the absolute path the command names (runc since 1.1)
        "CannotStartContainerError: Error response from daemon: failed to create task for container: failed to "
        "create shim task: OCI runtime create failed: runc create failed: unable to start container process: "
        'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown',
        False,
    ),
    (
        "CannotStartContainerError: Error response from daemon: failed to create shim task: OCI runtime create "
        'failed: runc create failed: unable to start container process: exec: "trian.py": executable file not '
        "found in $PATH: unknown",
        False,
    ),
    (
        "CannotPullContainerError: ref pull has been retried 5 time(s): failed to copy: httpReadSeeker: failed "
        "open: failed to do request: Get https://prod-us-east-1-starport-layer-bucket.s3.amazonaws.com/: dial "
        "tcp 52.216.0.1:443: i/o timeout",
        True,
    ),
    ("CannotPullContainerError: toomanyrequests: You have reached your pull rate limit.", True),
    ("CannotStartContainerError: Error response from daemon: no space left on device", True),
    ("CannotStartContainerError: bind for 0.0.0.0:8080 failed: port is already allocated", True),
    ("DockerTimeoutError: Could not transition to started; timed out after waiting 3m0s", True),
    ("ResourceInitializationError: failed to create new container runtime task: context deadline exceeded", True),
]


@pytest.mark.parametrize(("reason", "transient"), START_FAILURES)
def test_a_start_failure_is_resubmitted_only_when_another_try_may_start(reason: str, transient: bool) -> None:
    """Behaviour 6 of the real-cluster issue: a deterministic configuration problem fails at once,
    naming its reason; only host-level and network causes are resubmitted."""
    got = classify_attempt(attempt("Task failed to start", reason=reason))
    assert (got.outcome, got.message, got.interrupted) == (Outcome.INFRASTRUCTURE, reason, transient)


def interrupted(job: dict[str, Any]) -> int:
    return sum(1 for a in classify_attempts(job) if a.interrupted)


def test_jobs() -> None:
    # A job not yet ended is running whatever its reason: how long it waits is the clock's business.
    stuck = {"status": "RUNNABLE", "statusReason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - no Spot capacity"}
    assert classify_job(stuck).outcome is Outcome.RUNNING
    assert classify_job({"status": "RUNNABLE"}).outcome is Outcome.RUNNING
    assert classify_job({"status": "RUNNING", "attempts": []}).outcome is Outcome.RUNNING
    reclaimed_twice = {"status": "FAILED", "statusReason": RECLAIM, "attempts": [attempt(RECLAIM, 143)] * 2}
    assert classify_job(reclaimed_twice).outcome is Outcome.PREEMPTED and interrupted(reclaimed_twice) == 2
    recovered = {"status": "SUCCEEDED", "attempts": [attempt(RECLAIM, 143), attempt("Essential container", 0)]}
    assert classify_job(recovered).outcome is Outcome.SUCCEEDED and interrupted(recovered) == 1
    cancelled = {"status": "FAILED", "statusReason": "Cancelled by Airflow", "attempts": []}
    assert classify_job(cancelled).outcome is Outcome.INFRASTRUCTURE


@pytest.mark.parametrize(
    "status_reason",
    [
        # A queue's jobStateTimeLimitActions (AWS Batch user guide, "Job queue parameters"): the job is
        # cancelled with no attempt, and the reason names the blocking reason.
        "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
        "Canceled by JobStateTimeLimit action due to reason: MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        # Ours, past capacity_timeout, with and without a reason from AWS.
        capacity_cancel_reason({"statusReason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - no capacity"}, 600),
        capacity_cancel_reason({}, 600),
    ],
)
def test_a_job_cancelled_for_capacity_is_unschedulable_not_an_infrastructure_failure(status_reason: str) -> None:
    # Even after Batch retried a reclaimed attempt and the job then waited RUNNABLE again.
    for attempts in ([], [attempt(RECLAIM, 143)]):
        got = classify_job({"status": "FAILED", "statusReason": status_reason, "attempts": attempts})
        assert got.outcome is Outcome.UNSCHEDULABLE and got.message == status_reason


def test_the_cancel_reason_names_awss_reason_only_when_there_is_one() -> None:
    assert "CAPACITY:INSUFFICIENT" in capacity_cancel_reason({"statusReason": "CAPACITY:INSUFFICIENT"}, 30)
    assert "AWS gave no reason" in capacity_cancel_reason({}, 30)
    assert len(capacity_cancel_reason({"statusReason": "x" * 5000}, 30)) <= 1024  # CancelJob's limit


@given(st.lists(st.tuples(st.sampled_from(["SUBMITTED", "RUNNABLE", "STARTING", "RUNNING"]), st.floats(0, 50))))
def test_the_capacity_clock_counts_only_an_unbroken_runnable_wait(observations: list[tuple[str, float]]) -> None:
    clock, now, since = CapacityClock(timeout=60), 0.0, None
    for status, step in observations:
        now += step
        since = (since if since is not None else now) if status == "RUNNABLE" else None
        assert clock.expired(status, now) == (since is not None and now - since > 60)


@given(st.integers(min_value=0, max_value=100))
def test_the_strategy_retries_reclaims_within_the_budget_and_nothing_else(budget: int) -> None:
    """Checked against Batch's own rules (the emulator's ``action_after_attempt``)."""
    strategy = retry_strategy(SpotPolicy(max_interruptions=budget))
    assert len(strategy["evaluateOnExit"]) <= 5
    attempts = strategy["attempts"]
    assert 1 <= attempts <= 10 and attempts == min(10, budget + 1)

    def action(n: int, status_reason: str, exit_code: int | None) -> str:
        return action_after_attempt(
            strategy, attempts_so_far=n, status_reason=status_reason, reason=None, exit_code=exit_code
        )

    assert all(action(n, RECLAIM, 143) == "RETRY" for n in range(1, attempts))
    assert action(attempts, RECLAIM, 143) == "EXIT"
    assert action(1, "Essential container in task exited", 1) == "EXIT"
    assert action(1, "Essential container in task exited", None) == "EXIT"


def test_each_attempt_ends_at_its_stopped_at_and_a_job_without_attempts_at_its_own() -> None:
    """``stoppedAt`` is epoch milliseconds on an attempt and on the job (AWS Batch API reference); a
    job cancelled in RUNNABLE has no attempts, and may have no ``stoppedAt`` either."""
    from datetime import datetime, timezone

    job = {"status": "FAILED", "stoppedAt": 1_767_225_720_000, "attempts": [
        {"stoppedAt": 1_767_225_600_000}, {"startedAt": 1_767_225_650_000},
    ]}  # fmt: skip
    assert attempts_ended_at(job) == [datetime(2026, 1, 1, tzinfo=timezone.utc), None]
    assert attempts_ended_at({**job, "attempts": []}) == [datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc)]
    assert attempts_ended_at({"status": "FAILED", "attempts": []}) == [None]
    assert len(attempts_ended_at(job)) == len(classify_attempts(job))


@pytest.mark.parametrize(
    ("reason", "program"),
    [
        (next(r for r, _ in START_FAILURES if "/bin/sh" in r), "/bin/sh"),
        (next(r for r, _ in START_FAILURES if "trian.py" in r), "trian.py"),
        (START_FAILURES[0][0], None),  # a log group: nothing to execute is missing
    ],
)
def test_the_program_a_container_could_not_execute_is_named(reason: str, program: str | None) -> None:
    job = {"status": "FAILED", "attempts": [attempt("Task failed to start", reason=reason)]}
    assert missing_program(job) == program
    assert missing_program({**job, "status": "SUCCEEDED"}) is None


def multinode(status: str, main: dict[str, Any], nodes: int = 3) -> dict[str, Any]:
    """A multi-node parallel job as DescribeJobs gives it (the User Guide: its attempts, ``startedAt``, ``stoppedAt``
    and exit information are the main node's; ``nodeProperties`` with ``numNodes`` and ``mainNode``)."""
    return {
        "jobId": "mnp-1", "status": status, "statusReason": main["statusReason"], "attempts": [main],
        "nodeProperties": {"numNodes": nodes, "mainNode": 0, "nodeRangeProperties": []},
    }  # fmt: skip


def node(index: int, last: dict[str, Any]) -> dict[str, Any]:
    """One node (``<jobId>#<n>``): its own attempts and ``nodeDetails``."""
    return {"jobId": f"mnp-1#{index}", "nodeDetails": {"nodeIndex": index, "isMainNode": index == 0},
            "attempts": [last]}  # fmt: skip


def started(shape: dict[str, Any], at: int) -> dict[str, Any]:
    return {**shape, "startedAt": at}


def test_a_multi_node_job_failed_after_a_child_lost_its_host_is_an_interruption_of_the_node() -> None:
    """AWS fails a child node alone when its host goes ("If a child node dies, AWS Batch doesn't take any action on
    the other nodes"; MNP jobs run on on-demand EC2 only, whose hosts still fail): the training's main node then
    exits with an error. That is the node's interruption, to resubmit, not the training's own failure."""
    main = started(attempt("Essential container in task exited", 1), 100)
    job = multinode("FAILED", main)
    assert child_node_ids(job) == ["mnp-1#1", "mnp-1#2", "mnp-1#0"]  # the main node last
    lost = {"mnp-1#1": node(1, started(attempt("Essential container in task exited", 0), 110)),
            "mnp-1#2": {**node(2, started(attempt(RECLAIM, 143), 110)), "status": "FAILED"}}  # fmt: skip
    final = classify_job(job, lost)
    assert final.outcome is Outcome.PREEMPTED and final.reason == "NodeLost" and final.interrupted
    assert "node 2 lost its host (Host EC2" in final.message and "exit code 1" in final.message
    assert [a.reason for a in classify_attempts(job, lost)] == ["NodeLost"]
    # Without the nodes (a single job, or nodes not read) the main node's exit is the training's failure.
    assert classify_job(job).outcome is Outcome.APPLICATION and classify_attempts(job)[-1].reason == "Error"


@pytest.mark.parametrize(
    ("main", "child", "outcome"),
    [
        # a child that failed on its own: the training's failure
        (attempt("Essential container in task exited", 1), attempt("Essential container in task exited", 1),
         Outcome.APPLICATION),
        # the main node's own host went: a reclaim already (Batch retries it itself)
        (attempt(RECLAIM, 143), attempt("Essential container in task exited", 143), Outcome.PREEMPTED),
        # the main node could not start: not the training's exit, left as it reads
        (attempt("Task failed to start", reason="CannotPullContainerError: pull access denied for x"),
         attempt(RECLAIM, 143), Outcome.INFRASTRUCTURE),
    ],
)  # fmt: skip
def test_a_child_node_s_end_makes_no_interruption_of_anything_else(
    main: dict[str, Any], child: dict[str, Any], outcome: Outcome
) -> None:
    job = multinode("FAILED", started(main, 100), nodes=2)
    nodes = {"mnp-1#1": {**node(1, started(child, 110)), "status": "FAILED"}}
    assert classify_job(job, nodes).outcome is outcome
    assert classify_job(job, nodes).reason != "NodeLost"


def test_a_host_lost_in_an_earlier_attempt_is_not_this_attempt_s() -> None:
    """Batch retried the job after its main node's reclaim, relaunching every node: a child's reclaim belongs to
    the attempt it started in (child nodes start after the main node of their attempt)."""
    job = multinode("FAILED", started(attempt("Essential container in task exited", 1), 500), nodes=2)
    job["attempts"] = [started(attempt(RECLAIM, 143), 100), job["attempts"][0]]
    earlier = {"mnp-1#1": {**node(1, started(attempt(RECLAIM, 143), 110)), "status": "FAILED"}}
    assert classify_job(job, earlier).outcome is Outcome.APPLICATION
    assert [a.outcome for a in classify_attempts(job, earlier)] == [Outcome.PREEMPTED, Outcome.APPLICATION]


def test_only_a_running_or_failed_multi_node_job_has_nodes_to_read() -> None:
    main = started(attempt("Essential container in task exited", 0), 100)
    assert child_node_ids(multinode("SUCCEEDED", main)) == []
    assert child_node_ids(multinode("RUNNING", main)) == ["mnp-1#1", "mnp-1#2", "mnp-1#0"]
    assert child_node_ids(multinode("RUNNABLE", main)) == []
    assert child_node_ids({"jobId": "single", "status": "FAILED", "attempts": [main]}) == []


def test_a_child_whose_host_went_in_the_teardown_after_the_main_node_failed_is_no_cause() -> None:
    """The main node failed on its own; Batch then stops the children, and one's host may go meanwhile: the
    failure stays the training's (a user's bug is not resubmitted as interruptions). A host lost while STARTING
    has no start, only its end, and counts."""
    job = multinode("FAILED", {**started(attempt("Essential container in task exited", 1), 100), "stoppedAt": 200})
    after = {"mnp-1#1": {**node(1, {**started(attempt(RECLAIM), 110), "stoppedAt": 210}), "status": "FAILED"}}
    assert classify_job(job, after).outcome is Outcome.APPLICATION
    starting = {"mnp-1#1": {**node(1, {**attempt(RECLAIM), "startedAt": None, "stoppedAt": 150}), "status": "FAILED"}}
    assert classify_job(job, starting).reason == "NodeLost"


def running_job() -> dict[str, Any]:
    job = multinode("RUNNING", started(attempt("", 0), 100))
    job["attempts"] = []  # a running attempt is not listed yet
    return job


def main_node(started_at: int | None) -> dict[str, Any]:
    return {"jobId": "mnp-1#0", "status": "RUNNING", "startedAt": started_at,
            "nodeDetails": {"nodeIndex": 0, "isMainNode": True}, "attempts": []}  # fmt: skip


def test_a_running_multi_node_job_is_stopped_once_a_child_node_lost_its_host_and_only_then() -> None:
    """Batch leaves the other nodes running when a child node's host goes, and the training waits on its lost
    peer: the job is stopped, naming the node and the reason. A child that failed by its own exit is the main
    node's to judge (it decides the job's end, as AWS documents); one that succeeded, or still runs, stops
    nothing; nor does anything of a job no longer RUNNING."""
    job, main = running_job(), main_node(100)
    running = {**node(1, {}), "status": "RUNNING"}
    done = {**node(1, started(attempt("Essential container in task exited", 0), 110)), "status": "SUCCEEDED"}
    crashed = {**node(1, started(attempt("Essential container in task exited", 1), 110)), "status": "FAILED"}
    lost = {**node(2, started(attempt(RECLAIM), 110)), "status": "FAILED", "statusReason": RECLAIM}
    assert failed_child(job, {"mnp-1#0": main, "mnp-1#1": running}) is None
    assert failed_child(job, {"mnp-1#0": main, "mnp-1#1": done}) is None
    assert failed_child(job, {"mnp-1#0": main, "mnp-1#1": crashed}) is None
    reason = failed_child(job, {"mnp-1#0": main, "mnp-1#1": done, "mnp-1#2": lost})
    assert reason == f"{NODE_FAILED_PREFIX}: node 2 ({RECLAIM})"
    assert failed_child({**job, "status": "FAILED"}, {"mnp-1#0": main, "mnp-1#2": lost}) is None


def test_a_child_still_failed_from_the_last_attempt_does_not_stop_the_next() -> None:
    """Batch retried the job after its main node's host went; the children of the last attempt may still read
    FAILED until they are relaunched (AWS gives "no guarantees on the timing" of their launch): one that began
    before the main node's current run is not this attempt's. Without the main node's start nothing is stopped."""
    job = running_job()
    stale = {**node(1, started(attempt(RECLAIM), 110)), "status": "FAILED"}
    assert failed_child(job, {"mnp-1#0": main_node(300), "mnp-1#1": stale}) is None
    assert failed_child(job, {"mnp-1#0": main_node(None), "mnp-1#1": stale}) is None
    assert failed_child(job, {"mnp-1#0": main_node(100), "mnp-1#1": stale}) is not None


def test_a_child_node_lost_before_any_attempt_is_judged_by_its_own_times() -> None:
    """A node whose host went before an attempt was recorded carries its reason and times on the node itself."""
    job = multinode("FAILED", {**started(attempt("Essential container in task exited", 1), 100), "stoppedAt": 200})
    bare = {"jobId": "mnp-1#1", "nodeDetails": {"nodeIndex": 1, "isMainNode": False}, "attempts": [],
            "status": "FAILED", "statusReason": RECLAIM, "stoppedAt": 150}  # fmt: skip
    assert classify_job(job, {"mnp-1#1": bare}).reason == "NodeLost"

"""The spot run without Airflow: state through JSON, one interruption shape, decisions that move it on."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import Placement, SpotPolicy
from airflow_gpu.spot.run import PLATFORM_RETRIED, Interruption, SpotRun

RECLAIM = Classification(Outcome.PREEMPTED, "SpotReclaim", "Host EC2 (instance i-1) terminated.", 143, True)
BUG = Classification(Outcome.APPLICATION, "Error", "exit code 3", 3)
DONE = Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
NO_CAPACITY = Classification(Outcome.UNSCHEDULABLE, "CapacityTimeout", "RUNNABLE for longer than capacity_timeout")
KEYS = set(Interruption.__dataclass_fields__)


def run(backend: str = "batch", **policy: object) -> SpotRun:
    return SpotRun.start(SpotPolicy(**policy), ["H100:8", "L4"], backend, "spot")  # type: ignore[arg-type]


def test_a_reclaim_is_recorded_once_and_resubmitted_on_the_same_capacity() -> None:
    spot = run()
    spot.submitted("job-1")
    decision = spot.finish(RECLAIM, [RECLAIM], location="gpu-spot")
    assert decision.action == "resubmit" and spot.placement == Placement(0, "spot")
    assert spot.submissions == 1 and spot.interruptions_on_capacity == 1 and spot.workload is None
    (record,) = spot.interruptions
    assert set(record) == KEYS and record["workload"] == "job-1" and record["action"] == "resubmit"
    assert spot.environment()["AIRFLOW_GPU_ATTEMPT"] == "2" and spot.environment()["AIRFLOW_GPU_INTERRUPTIONS"] == "1"
    spot.finish(RECLAIM, [RECLAIM], workload="job-1")  # the same attempt seen again (a retry after a crash)
    assert len(spot.interruptions) == 1


def test_attempts_the_platform_retried_count_against_the_budget() -> None:
    """Batch's retryStrategy ran two reclaimed attempts before the third was reclaimed too."""
    spot = run(max_interruptions=2)
    spot.submitted("job-1")
    decision = spot.finish(RECLAIM, [RECLAIM, RECLAIM, RECLAIM])
    assert decision.action == "resubmit" and spot.placement == Placement(0, "on-demand")
    assert [i["action"] for i in spot.interruptions] == [PLATFORM_RETRIED, PLATFORM_RETRIED, "resubmit"]
    assert spot.interruptions_on_capacity == 0  # a fresh budget on the new capacity


def test_no_capacity_moves_to_the_next_candidate_then_on_demand_and_a_bug_fails_without_retries() -> None:
    spot = run("kubernetes")
    assert spot.finish(NO_CAPACITY, workload="p1").placement == Placement(1, "spot")
    assert spot.finish(NO_CAPACITY, workload="p2").placement == Placement(0, "on-demand")
    assert spot.interruptions == []  # no capacity is not an interruption
    decision = spot.finish(BUG, workload="p3")
    assert decision.action == "fail" and not decision.retry_allowed
    assert "the application failed" in spot.failure_message(decision)


def test_the_failure_message_lists_every_interruption() -> None:
    spot = run(max_interruptions=0, fallback_to_on_demand=False)
    decision = spot.finish(RECLAIM, workload="job-9")
    message = spot.failure_message(decision, "\nThe cluster offers: nothing")
    assert "job job-9 (attempt 1) on H100:8/spot: SpotReclaim" in message and message.endswith("nothing")


def test_a_state_from_another_dag_version_is_ignored_not_misread() -> None:
    spot = run()
    assert spot.restore({"version": 1, "candidate": 5}) is not None  # the DAG lost a candidate
    assert spot.restore({"version": 2, "candidate": 0}) is not None  # a newer release wrote it
    assert spot.placement == Placement(0, "spot")


def test_a_state_written_before_the_shared_core_is_read_as_it_was_written() -> None:
    """A Batch job or pod running across the upgrade: its state has no version and the old keys."""
    spot = run()
    legacy = {"job_id": "j", "candidate": 1, "capacity": "on-demand", "submissions": 2, "seen_attempts": ["j#1"]}
    assert spot.restore(legacy) is None
    assert spot.placement == Placement(1, "on-demand") and spot.workload == "j" and spot.seen == {"j#1"}
    spot.finish(DONE, [RECLAIM, DONE], workload="j")  # attempt 1 was counted before the upgrade
    assert spot.interruptions == []


outcomes = st.sampled_from([RECLAIM, BUG, DONE, NO_CAPACITY])


@given(st.lists(st.tuples(outcomes, st.lists(outcomes, max_size=3)), max_size=8))
def test_the_state_survives_json_at_every_step(steps: list[tuple[Classification, list[Classification]]]) -> None:
    """Whatever happened, the JSON a deferral carries gives back the same run."""
    spot = run()
    for number, (final, attempts) in enumerate(steps):
        spot.submitted(f"w{number}")
        if spot.finish(final, [*attempts, final]).action != "resubmit":
            break
        again = run()
        assert again.restore(json.loads(json.dumps(spot.to_json()))) is None
        assert again.to_json() == spot.to_json() and again.environment() == spot.environment()
        assert all(set(i) == KEYS for i in spot.interruptions)


def test_legacy_interruption_records_take_the_one_shape() -> None:
    spot = run()
    legacy = {"job_id": "j", "candidate": 0, "capacity": "spot", "interruptions": [
        {"time": "t", "job": "j", "attempt": 1, "accelerator": "H100:8", "capacity": "spot", "queue": "gpu-spot",
         "outcome": "preempted", "reason": "SpotReclaim", "message": "m", "exit_code": 143}]}  # fmt: skip
    assert spot.restore(legacy) is None
    (record,) = spot.interruptions
    assert set(record) == KEYS and record["workload"] == "j" and record["location"] == "gpu-spot"
    assert "job j (attempt 1) on H100:8/spot: SpotReclaim" in spot.failure_message(spot.finish(BUG, workload="j2"))


def test_reclaims_the_platform_retried_count_even_when_the_job_then_found_no_capacity() -> None:
    """Batch retried two reclaimed attempts itself; the job then waited RUNNABLE and was cancelled."""
    spot = run(max_interruptions=3)
    spot.finish(NO_CAPACITY, [RECLAIM, RECLAIM], workload="j1")
    assert spot.placement == Placement(1, "spot") and spot.interruptions_on_capacity == 2
    assert [i["action"] for i in spot.interruptions] == [PLATFORM_RETRIED, PLATFORM_RETRIED]

"""``MissingRanks`` and ``refused``: a training Job whose ranks the API would not create (issue 25, behaviour 1)."""

from __future__ import annotations

from typing import Any

from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.spot.training_job import MissingRanks, refused


def job(parallelism: int = 2, **status: Any) -> dict[str, Any]:
    return {"spec": {"parallelism": parallelism}, "status": status}


POD: dict[str, Any] = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}


def test_missing_ranks_count_only_past_the_timeout_and_reset_when_they_come() -> None:
    clock = MissingRanks(10)
    assert clock.check(job(), [POD], 0) is None  # the clock starts
    assert clock.check(job(), [POD], 10) is None  # not yet past it
    assert clock.check(job(), [POD], 10.5) == 1
    assert clock.check(job(), [POD, POD], 11) is None  # admitted at last: the clock stops
    assert clock.check(job(), [], 12) is None and clock.check(job(), [], 22.5) == 2  # and starts again


def test_a_judged_job_or_one_whose_spec_is_not_there_waits_for_no_rank() -> None:
    clock = MissingRanks(0)
    failed = job(conditions=[{"type": "FailureTarget", "status": "True"}])
    assert clock.check(failed, [], 0) is None and clock.check(failed, [], 5) is None
    assert clock.check(None, [], 5) is None
    slim = {"status": {}}  # the triggerer's watch keeps no spec: the caller says how many
    clock.check(slim, [], 5, expected=2)
    assert clock.check(slim, [], 6, expected=2) == 2


def test_refused_is_infrastructure_that_is_not_transient_with_the_latest_message() -> None:
    events = ['Error creating: pods "j-1-aaaaa" is forbidden: old', 'Error creating: pods "j-1-b" is forbidden: new']
    result = refused("j", 1, 2, 120, events)
    assert result.outcome is Outcome.INFRASTRUCTURE and not result.interrupted and result.reason == "FailedCreate"
    assert f"{events[-1]}; ask the cluster's administrators" in result.message  # the words, then what to do
    assert "1 of 2 machines of Job j" in result.message
    assert "startup_timeout_seconds=120" in result.message
    assert "no FailedCreate event" in refused("j", 2, 2, 120, []).message

"""AWS Batch's ``retryStrategy`` rules as the emulator applies them (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.testing.batch.retry import action_after_attempt, pattern_matches

SPOT = {
    "attempts": 3,
    "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "retry"}, {"onReason": "*", "action": "EXIT"}],
}
RECLAIM = "Host EC2 (instance i-0abc) terminated."


@pytest.mark.parametrize(
    ("strategy", "attempts", "status_reason", "reason", "exit_code", "expected"),
    [
        (SPOT, 1, RECLAIM, None, 143, "RETRY"),
        (SPOT, 1, RECLAIM, None, None, "RETRY"),
        (SPOT, 3, RECLAIM, None, 143, "EXIT"),  # attempts used up
        (SPOT, 1, "Essential container in task exited", None, 1, "EXIT"),  # a bug: the catch-all
        (SPOT, 1, "Essential container in task exited", "OutOfMemoryError: Container killed", 137, "EXIT"),
        (None, 1, RECLAIM, None, 143, "EXIT"),  # no strategy: one attempt
        ({"attempts": 2}, 1, "anything", None, 1, "RETRY"),  # attempts without rules: retry every failure
        ({"attempts": 2, "evaluateOnExit": [{"onExitCode": "13*", "action": "EXIT"}]}, 1, "x", None, 137, "EXIT"),
        ({"attempts": 2, "evaluateOnExit": [{"onExitCode": "13*", "action": "EXIT"}]}, 1, "x", None, 1, "RETRY"),
        ({"attempts": 2, "evaluateOnExit": [{"onExitCode": "1", "action": "EXIT"}]}, 1, "x", None, None, "RETRY"),
    ],
)
def test_actions(
    strategy: dict[str, object] | None,
    attempts: int,
    status_reason: str,
    reason: str | None,
    exit_code: int | None,
    expected: str,
) -> None:
    got = action_after_attempt(
        strategy, attempts_so_far=attempts, status_reason=status_reason, reason=reason, exit_code=exit_code
    )
    assert got == expected


@given(st.text(max_size=20), st.text(max_size=20))
def test_a_trailing_star_is_a_prefix_match(prefix: str, rest: str) -> None:
    assert pattern_matches(prefix + "*", prefix + rest)
    assert pattern_matches(prefix + rest, prefix + rest)
    assert not pattern_matches(prefix + "x", prefix)

"""``next_step``: every branch of the spot policy, as a table."""

from __future__ import annotations

import pytest

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import Placement, SpotPolicy, next_step

PREEMPTED = Classification(Outcome.PREEMPTED, "TerminationByKubelet", transient=True)
EVICTED = Classification(Outcome.EVICTED, "EvictionByEvictionAPI", transient=True)
UNSCHEDULABLE = Classification(
    Outcome.UNSCHEDULABLE, "Unschedulable", "0/4 nodes are available: 2 Insufficient nvidia.com/gpu."
)
APP = Classification(Outcome.APPLICATION, "Error", "container base failed: exit code 3", 3)
IMAGE = Classification(Outcome.INFRASTRUCTURE, "ImagePullBackOff", "Back-off pulling image")
SPOT0 = Placement(0, "spot")

CASES = [
    # (result, placement, interruptions, candidates, requested, policy kwargs)
    #   -> (action, placement, retry_allowed, counts as interruption)
    (Classification(Outcome.SUCCEEDED, "Succeeded"), SPOT0, 0, 1, "spot", {}, ("succeed", SPOT0, True, False)),
    (PREEMPTED, SPOT0, 0, 1, "spot", {}, ("resubmit", SPOT0, True, True)),
    (EVICTED, SPOT0, 2, 1, "spot", {}, ("resubmit", SPOT0, True, True)),
    (PREEMPTED, SPOT0, 3, 1, "spot", {}, ("resubmit", Placement(0, "on-demand"), True, True)),
    (PREEMPTED, SPOT0, 3, 1, "spot", {"fallback_to_on_demand": False}, ("fail", SPOT0, True, False)),
    (PREEMPTED, Placement(0, "on-demand"), 3, 1, "spot", {}, ("fail", Placement(0, "on-demand"), True, False)),
    (PREEMPTED, Placement(0, None), 0, 1, None, {"max_interruptions": 0}, ("fail", Placement(0, None), True, False)),
    (UNSCHEDULABLE, SPOT0, 0, 2, "spot", {}, ("resubmit", Placement(1, "spot"), True, False)),
    (UNSCHEDULABLE, Placement(1, "spot"), 0, 2, "spot", {}, ("resubmit", Placement(0, "on-demand"), True, False)),
    (UNSCHEDULABLE, Placement(1, "on-demand"), 0, 2, "spot", {}, ("fail", Placement(1, "on-demand"), True, False)),
    (UNSCHEDULABLE, Placement(0, None), 0, 1, None, {}, ("fail", Placement(0, None), True, False)),
    (APP, SPOT0, 0, 1, "spot", {}, ("fail", SPOT0, False, False)),
    (APP, SPOT0, 0, 1, "spot", {"retry_on_app_failure": True}, ("fail", SPOT0, True, False)),
    (IMAGE, SPOT0, 0, 1, "spot", {}, ("fail", SPOT0, True, False)),
]


@pytest.mark.parametrize(
    ("result", "placement", "interruptions", "candidates", "requested", "kwargs", "expected"), CASES
)
def test_next_step(result, placement, interruptions, candidates, requested, kwargs, expected) -> None:  # type: ignore[no-untyped-def]
    decision = next_step(SpotPolicy(**kwargs), result, placement, interruptions, candidates, requested)
    assert (decision.action, decision.placement, decision.retry_allowed, decision.counts_as_interruption) == expected
    assert decision.message


def test_messages_say_why() -> None:
    policy = SpotPolicy(max_interruptions=2, capacity_timeout=30)
    assert "interruption 1 of 2" in next_step(policy, PREEMPTED, SPOT0, 0, 1, "spot").message
    assert "falling back to on-demand" in next_step(policy, PREEMPTED, SPOT0, 2, 1, "spot").message
    unschedulable = next_step(policy, UNSCHEDULABLE, Placement(0, "on-demand"), 0, 1, "spot").message
    assert "capacity_timeout=30s" in unschedulable and "Insufficient nvidia.com/gpu" in unschedulable
    assert "retry_on_app_failure=False" in next_step(policy, APP, SPOT0, 0, 1, "spot").message


@pytest.mark.parametrize(
    "kwargs",
    [{"max_interruptions": -1}, {"capacity_timeout": 0}, {"grace_period_seconds": -5}, {"retries": 3}],
)
def test_bad_policies_fail_at_parse_time(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SpotPolicy(**kwargs)  # type: ignore[arg-type]

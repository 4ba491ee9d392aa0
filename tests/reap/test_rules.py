"""The orphan rule, case by case and as properties over every state Airflow 3.3 has."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.reap.rules import ACTIVE, FINISHED, InstanceState, Resource, TaskTry, orphan_reason

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
GRACE = timedelta(minutes=10)
#: TaskInstanceState of Airflow 3.3, and None ("no status").
STATES = [*sorted(ACTIVE | FINISHED | {"up_for_retry"}), None]


def pod(try_number: int = 1, age: timedelta = timedelta(hours=1), adoptable: bool = True) -> Resource:
    task = TaskTry("dag", "train", "manual__2026-05-01T00:00:00+00:00", -1, try_number)
    return Resource("kubernetes", "pod", "train-abc", "default", task, NOW - age, "Running", adoptable)


def judge(resource: Resource, instance: InstanceState | None, later: bool = False) -> str | None:
    return orphan_reason(resource, instance, now=NOW, grace=GRACE, later_try_has_work=later)


@pytest.mark.parametrize(
    ("resource", "instance", "later", "orphan"),
    [
        (pod(1), InstanceState("failed", 1, NOW - timedelta(hours=1)), False, True),
        (pod(1), InstanceState("success", 1, NOW - timedelta(hours=1)), False, True),
        (pod(1), InstanceState("upstream_failed", 1), False, True),
        (pod(1), InstanceState("running", 1), False, False),
        (pod(1), InstanceState("deferred", 1), False, False),
        (pod(1), InstanceState("queued", 1), False, False),
        (pod(1), None, False, True),  # the run was deleted
        (pod(1, age=timedelta(minutes=2)), None, False, False),  # younger than the grace period
        (pod(1), InstanceState("failed", 1, NOW - timedelta(minutes=2)), False, False),  # cleanup may be under way
        (pod(1), InstanceState("running", 2), True, True),  # try 2 runs with a pod of its own
        (pod(1), InstanceState("running", 2), False, False),  # try 2 may have reattached to it
        (pod(1, adoptable=False), InstanceState("running", 2), False, True),  # marked checked: nobody takes it
        (pod(1), InstanceState("up_for_retry", 1), False, False),  # left for the next try (retry_handover)
        (pod(1, adoptable=False), InstanceState("up_for_retry", 1), False, True),
        (pod(1), InstanceState(None, 1), False, False),  # cleared: the next try may take it over
        (pod(3), InstanceState("running", 1), False, True),  # made by a try Airflow never had: run made anew
        (pod(1), InstanceState("some_future_state", 1), False, False),
    ],
)
def test_the_rule(resource: Resource, instance: InstanceState | None, later: bool, orphan: bool) -> None:
    why = judge(resource, instance, later)
    assert (why is not None) == orphan, why


def test_the_reason_names_the_tries() -> None:
    assert judge(pod(1), InstanceState("running", 2), True) == "made by try 1; try 2 (running) has work of its own"
    assert judge(pod(1), InstanceState("failed", 1)) == "the task instance is failed"


@given(
    state=st.sampled_from(STATES),
    made=st.integers(1, 5),
    current=st.integers(1, 5),
    adoptable=st.booleans(),
    later=st.booleans(),
    age=st.integers(0, 10_000),
)
def test_young_work_is_never_an_orphan(state: str | None, made: int, current: int, adoptable: bool, later: bool,
                                       age: int) -> None:  # fmt: skip
    young = pod(made, age=timedelta(seconds=age % 600), adoptable=adoptable)
    assert judge(young, InstanceState(state, current), later) is None
    assert judge(young, None, later) is None


@given(made=st.integers(1, 5), adoptable=st.booleans(), state=st.sampled_from(sorted(ACTIVE)))
def test_the_running_tries_own_work_is_never_an_orphan(made: int, adoptable: bool, state: str) -> None:
    assert judge(pod(made, adoptable=adoptable), InstanceState(state, made)) is None


@given(
    made=st.integers(1, 5),
    current=st.integers(1, 5),
    adoptable=st.booleans(),
    later=st.booleans(),
    state=st.sampled_from(sorted(FINISHED)),
    ended=st.integers(600, 100_000),
)
def test_old_work_of_a_finished_task_is_always_an_orphan(made: int, current: int, adoptable: bool, later: bool,
                                                         state: str, ended: int) -> None:  # fmt: skip
    instance = InstanceState(state, current, NOW - timedelta(seconds=ended))
    assert judge(pod(made, adoptable=adoptable), instance, later) is not None


@given(made=st.integers(1, 4), extra=st.integers(1, 3), state=st.sampled_from([*sorted(ACTIVE), "up_for_retry", None]))
def test_an_earlier_tries_work_beside_the_later_tries_own_is_an_orphan(
    made: int, extra: int, state: str | None
) -> None:
    assert judge(pod(made), InstanceState(state, made + extra), later=True) is not None

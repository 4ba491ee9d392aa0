"""Issue 25, behaviour 8: a training Job's and its Service's names do not clash across 1,000 concurrent
trainings, and stay names the API server accepts.

A name is ``<name>-<digest>`` of the task try's identity (32 bits of SHA-256): 1,000 concurrent Jobs of
one task name (a mapped fan-out, or one DAG run a day for three years) clash with a probability of
about 1 in 8,600 if the digest were random, and the test below checks the real digests of such sets.
Kubernetes' own limits are the bound: a Service name is a DNS-1035 label (a letter first, at most 63
characters), and the Job controller names each pod's hostname ``<job>-<index>``, itself a DNS label.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.utils.training_job import MAX_NAME, base_name, job_name

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def names(identities: list[tuple[object, ...]], stem: str = "train") -> list[str]:
    return [base_name(stem, identity) for identity in identities]


@pytest.mark.parametrize(
    "identities",
    [
        # 1,000 shards of one mapped task in one run
        [("fanout", "train", "manual__2026-11-26T10:00:00+00:00", shard, 1) for shard in range(1000)],
        # 1,000 daily runs of one task
        [("nightly", "train", f"scheduled__2026-01-01T00:00:00+00:00-{day}", -1, 1) for day in range(1000)],
        # one task's tries and 999 other DAGs' tasks of the same name
        [(f"dag_{i}", "train", "manual__1", -1, 1 + i % 3) for i in range(1000)],
    ],
    ids=["shards", "runs", "dags"],
)
def test_a_thousand_concurrent_trainings_have_a_thousand_names(identities: list[tuple[object, ...]]) -> None:
    made = names(identities)
    assert len(set(made)) == len(made)
    replaced = [job_name(name, submission) for name in made for submission in range(3)]
    assert len(set(replaced)) == len(replaced)  # a replacement never takes another training's name


@given(
    stem=st.text(min_size=0, max_size=200),
    identity=st.tuples(st.text(max_size=50), st.text(max_size=50), st.integers(-1, 10_000), st.integers(1, 100)),
    submission=st.integers(0, 99_999),
)
def test_every_name_is_a_service_name_and_leaves_room_for_the_pod_index(
    stem: str, identity: tuple[object, ...], submission: int
) -> None:
    name = job_name(base_name(stem, identity), submission)
    assert DNS_1035.match(name), name
    assert len(name) <= MAX_NAME
    assert len(f"{name}-999") <= 63  # the hostname of a thousandth machine's pod


def test_the_same_try_always_gets_the_same_name() -> None:
    """Deterministic: a trigger that runs twice, or again after a restart, meets the Job it made (409)."""
    identity = ("d", "t", "manual__1", 3, 2)
    assert base_name("Train Model!", identity) == base_name("Train Model!", identity)
    assert base_name("Train Model!", identity) != base_name("Train Model!", (*identity[:4], 3))

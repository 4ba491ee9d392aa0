"""The reattach fence (``airflow_gpu.utils.pod_identity``): which pods a task try may take over."""

from __future__ import annotations

import pytest

from airflow_gpu.utils.pod_identity import identity_mismatch

TASK = {"dag_id": "train", "task_id": "fit", "run_id": "manual__2026-11-22", "kubernetes_pod_operator": "True"}


def labels(**changes: str) -> dict[str, str]:
    return {**TASK, "try_number": "1", **changes}


def test_own_pod_from_an_earlier_try_is_taken() -> None:
    assert identity_mismatch(labels(), "u1", expected=TASK, try_number=2, recorded_uid="u1") is None
    assert identity_mismatch(labels(try_number="2"), "u1", expected=TASK, try_number=2) is None


@pytest.mark.parametrize(
    ("pod_labels", "uid", "recorded", "why"),
    [
        (labels(run_id="scheduled__2026-11-21"), "u1", None, "label run_id='scheduled__2026-11-21'"),
        (labels(task_id="eval"), "u1", None, "label task_id='eval'"),
        (labels(dag_id="other"), "u1", None, "label dag_id='other'"),
        (labels(), "u2", "u1", "uid u2 is not the recorded u1"),
        (labels(try_number="3"), "u1", None, "made by try 3, this is try 2"),
        (labels(map_index="4"), "u1", None, "mapped instance 4"),
        ({"app": "someone-else"}, "u1", None, "label dag_id=None"),
    ],
)
def test_a_stranger_is_refused_with_the_reason(
    pod_labels: dict[str, str], uid: str, recorded: str | None, why: str
) -> None:
    mismatch = identity_mismatch(pod_labels, uid, expected=TASK, try_number=2, recorded_uid=recorded)
    assert mismatch is not None and why in mismatch


def test_map_index_must_match() -> None:
    mapped = {**TASK, "map_index": "1"}
    assert identity_mismatch(labels(map_index="1"), "u", expected=mapped, try_number=1) is None
    assert "map_index='2'" in str(identity_mismatch(labels(map_index="2"), "u", expected=mapped, try_number=1))

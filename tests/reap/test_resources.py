"""Which objects are the provider's, and which task try made each, from the marks the real operator writes."""

from __future__ import annotations

from typing import Any

from airflow_gpu.reap.resources import CHECKED_LABEL, Skipped, from_kubernetes
from airflow_gpu.reap.rules import Resource, TaskTry
from airflow_gpu.utils.pod_identity import TASK_ANNOTATION
from tests.operators.task_context import Ti
from tests.reap.conftest import RUN, pod_marks


def running_pod(marks: dict[str, Any], **spec: Any) -> dict[str, Any]:
    metadata = {"name": "p", "namespace": "ml", "uid": "u-1", "creationTimestamp": "2026-05-01T10:00:00Z", **marks}
    return {"metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


def test_the_operators_pod_names_its_exact_task_try_though_kpos_labels_are_shortened() -> None:
    marks = pod_marks(Ti(3, dag_id="gpu", task_id="shard", run_id=RUN, map_index=7))
    assert marks["labels"]["run_id"] != RUN  # KPO's make_safe_label_value hashed it
    found = from_kubernetes("pod", running_pod(marks, terminationGracePeriodSeconds=90))
    assert isinstance(found, Resource)
    assert found.task == TaskTry("gpu", "shard", RUN, 7, 3)
    assert (found.grace_seconds, found.uid, found.adoptable) == (90, "u-1", True)


def test_a_pod_from_before_the_annotation_with_a_shortened_label_is_skipped_not_guessed() -> None:
    marks = pod_marks(Ti(1, dag_id="gpu", task_id="shard", run_id=RUN))
    del marks["annotations"][TASK_ANNOTATION]
    skipped = from_kubernetes("pod", running_pod(marks))
    assert isinstance(skipped, Skipped) and "run_id label was shortened" in skipped.why
    marks = pod_marks(Ti(2, dag_id="gpu", task_id="shard", run_id="nightly_42"))
    del marks["annotations"][TASK_ANNOTATION]
    found = from_kubernetes("pod", running_pod(marks))
    assert isinstance(found, Resource) and found.task == TaskTry("gpu", "shard", "nightly_42", -1, 2)


def test_only_live_marked_pods_of_no_job_are_candidates() -> None:
    marks = pod_marks(Ti(1, dag_id="gpu", task_id="shard", run_id=RUN))
    plain = {"labels": {k: v for k, v in marks["labels"].items() if not k.startswith("airflow-gpu/")}}
    assert from_kubernetes("pod", running_pod(plain)) is None
    finished = running_pod(marks)
    finished["status"]["phase"] = "Succeeded"
    assert from_kubernetes("pod", finished) is None
    deleting = running_pod(marks)
    deleting["metadata"]["deletionTimestamp"] = "2026-05-01T11:00:00Z"
    assert from_kubernetes("pod", deleting) is None
    rank = running_pod({**marks, "labels": {**marks["labels"], "airflow-gpu/training-job": "j"}})
    assert from_kubernetes("pod", rank) is None  # its Job is the candidate
    checked = from_kubernetes("pod", running_pod({**marks, "labels": {**marks["labels"], CHECKED_LABEL: "True"}}))
    assert isinstance(checked, Resource) and not checked.adoptable


def test_a_training_machine_held_after_its_end_is_a_candidate_and_a_live_one_goes_with_its_job() -> None:
    """A training Job's machines carry the end hold too (``utils.end_hold``): one that ended, or is being
    deleted, stays in the API until let go, after its Job may be gone, so the reaper lets it go; a live one
    still goes with its Job, which is the candidate."""
    from airflow_gpu.utils.end_hold import END_HOLD

    marks = pod_marks(Ti(1, dag_id="gpu", task_id="train", run_id=RUN))
    labels = {**marks["labels"], "airflow-gpu/training-job": "j"}
    live = running_pod({**marks, "labels": labels, "finalizers": [END_HOLD]})
    assert from_kubernetes("pod", live) is None
    ended = running_pod({**marks, "labels": labels, "finalizers": [END_HOLD]})
    ended["status"]["phase"] = "Succeeded"
    found = from_kubernetes("pod", ended)
    assert isinstance(found, Resource) and found.held and found.status == "Succeeded, held (ended)"
    deleting = running_pod({**marks, "labels": labels, "finalizers": [END_HOLD]})
    deleting["metadata"]["deletionTimestamp"] = "2026-05-01T11:00:00Z"
    found = from_kubernetes("pod", deleting)
    assert isinstance(found, Resource) and found.held and found.status == "Running, held (being deleted)"

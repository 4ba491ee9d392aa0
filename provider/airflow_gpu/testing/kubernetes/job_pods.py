"""What the Job controller reads off a Job's pods (``job_controller.go``, ``pod_failure_policy.go``,
``indexed_job_utils.go``, ``backoff_utils.go``): activity, failure, the pod failure policy's verdict,
completion indexes and their ``orderedIntervals`` form, and the per-index failure counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_gpu.testing.kubernetes.job_spec import COMPLETION_INDEX
from airflow_gpu.testing.kubernetes.objects import now
from airflow_gpu.testing.kubernetes.store import Obj

JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def condition(job: Obj, kind: str) -> dict[str, Any] | None:
    """The job's condition of that type when its status is True."""
    for entry in (job.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind and entry.get("status") == "True":
            return entry  # type: ignore[no-any-return]
    return None


def is_finished(job: Obj) -> bool:
    return condition(job, "Complete") is not None or condition(job, "Failed") is not None


def controller_of(pod: Obj) -> dict[str, Any] | None:
    for reference in pod["metadata"].get("ownerReferences") or []:
        if reference.get("controller"):
            return reference  # type: ignore[no-any-return]
    return None


def completion_index(pod: Obj) -> int:
    """``getCompletionIndex``: the annotation as a non-negative integer, else -1."""
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        index = int(value) if value is not None else -1
    except ValueError:
        return -1
    return index if index >= 0 else -1


def is_active(pod: Obj) -> bool:
    """``FilterActivePods``: not terminal and not being deleted."""
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def is_terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) and pod["status"].get("phase") not in ("Succeeded", "Failed")


def is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])


def has_tracking_finalizer(pod: Obj) -> bool:
    return JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])


def only_replace_failed(job: Obj) -> bool:
    spec = job["spec"]
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def is_pod_failed(pod: Obj, job: Obj) -> bool:
    """``isPodFailed``: Failed, or (unless only failed pods are replaced) being deleted and not Succeeded."""
    phase = pod["status"].get("phase")
    if phase == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return bool(pod["metadata"].get("deletionTimestamp")) and phase != "Succeeded"


def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[str | None, bool, str | None]:
    """``matchPodFailurePolicy``: (FailJob message, whether the failure counts, the action matched)."""
    policy = job["spec"].get("podFailurePolicy")
    if not policy:
        return None, True, None
    status, metadata = pod["status"], pod["metadata"]
    for number, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            matched = _matching_container(status, rule["onExitCodes"])
            if matched is None:
                continue
            message = (
                f"Container {matched['name']} for pod {metadata['namespace']}/{metadata['name']} failed with exit "
                f"code {matched['state']['terminated']['exitCode']} matching {action} rule at index {number}"
            )
        elif rule.get("onPodConditions"):
            found = _matching_condition(status, rule["onPodConditions"])
            if found is None:
                continue
            message = (
                f"Pod {metadata['namespace']}/{metadata['name']} has condition {found['type']} matching {action} "
                f"rule at index {number}"
            )
        else:
            continue
        if action == "Ignore":
            return None, False, action
        if action in ("Count", "FailIndex"):  # FailIndex counts, and fails the index (``index_failed``)
            return None, True, action
        if action == "FailJob":
            return message, True, action
    return None, True, None


def _matching_container(status: dict[str, Any], requirement: dict[str, Any]) -> dict[str, Any] | None:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for entry in statuses:
            terminated = (entry.get("state") or {}).get("terminated")
            if terminated is None or requirement.get("containerName") not in (None, entry.get("name")):
                continue
            code = terminated.get("exitCode", 0)
            if code != 0 and ((operator == "In" and code in values) or (operator == "NotIn" and code not in values)):
                return entry  # type: ignore[no-any-return]
    return None


def _matching_condition(status: dict[str, Any], patterns: list[dict[str, Any]]) -> dict[str, Any] | None:
    for entry in status.get("conditions") or []:
        for pattern in patterns:
            if entry.get("type") == pattern.get("type") and entry.get("status") == pattern.get("status", "True"):
                return entry  # type: ignore[no-any-return]
    return None


# --- completed indexes: orderedIntervals ------------------------------------------------------


def parse_indexes(text: str | None, completions: int) -> set[int]:
    """``succeededIndexesFromString``: "0,2-4" to {0, 2, 3, 4}, ignoring what is out of range."""
    indexes: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            continue
        indexes.update(range(low, min(high, completions - 1) + 1))
    return {i for i in indexes if 0 <= i < completions}


def format_indexes(indexes: Iterable[int]) -> str:
    """``orderedIntervals.String``: runs of three or more as "a-b", a pair as "a,b"."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        parts.append(str(first) if last == first else f"{first},{last}" if last == first + 1 else f"{first}-{last}")
        start = end + 1
    return ",".join(parts)


def finished_at(pod: Obj) -> datetime:
    """``getFinishedTime``: the last container finish, else Ready=False, else the deletion, else creation."""
    finished = [
        parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in pod["status"].get("containerStatuses") or []
    ]
    if finished and all(finished):
        return max(t for t in finished if t is not None)
    for entry in pod["status"].get("conditions") or []:
        if entry.get("type") == "Ready" and entry.get("status") == "False" and entry.get("lastTransitionTime"):
            return parse_time(entry["lastTransitionTime"]) or now()
    deleted = parse_time(pod["metadata"].get("deletionTimestamp"))
    if deleted is not None:
        return deleted - timedelta(seconds=pod["metadata"].get("deletionGracePeriodSeconds") or 0)
    return parse_time(pod["metadata"].get("creationTimestamp")) or now()


def progress(pod: Obj, descending: bool = False) -> tuple[int, int, int]:
    """How far a pod got (``controller.ActivePods`` order): scheduled, then phase, then ready."""
    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod["status"].get("phase"), 3)
    key = (int(bool(pod["spec"].get("nodeName"))), phase, int(is_ready(pod)))
    return (-key[0], -key[1], -key[2]) if descending else key


@dataclass(frozen=True)
class IndexFailures:
    """The failures of one index of a Job with ``backoffLimitPerIndex``, after its last failed pod:
    what its replacement's ``job-index-failure-count`` and ``job-index-ignored-failure-count``
    annotations say, and when that pod failed (``getNewIndexFailureCounts``)."""

    counted: int
    ignored: int
    at: datetime

    @property
    def total(self) -> int:
        return self.counted + self.ignored


def _annotation_count(pod: Obj, key: str) -> int:
    try:
        return max(0, int((pod["metadata"].get("annotations") or {}).get(key, 0)))
    except ValueError:
        return 0


def after_failure(pod: Obj, counted: bool) -> IndexFailures:
    return IndexFailures(
        _annotation_count(pod, INDEX_FAILURE_COUNT) + counted,
        _annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT) + (not counted),
        finished_at(pod),
    )


def index_failed(job: Obj, pod: Obj, counted: bool, action: str | None) -> bool:
    """``isIndexFailed``: a ``FailIndex`` rule matched, or a counted failure with the limit used up."""
    if action == "FailIndex":
        return True
    return counted and _annotation_count(pod, INDEX_FAILURE_COUNT) >= job["spec"]["backoffLimitPerIndex"]


def success_policy_met(job: Obj, succeeded: set[int]) -> str | None:
    """``matchSuccessPolicy``: the first rule whose ``succeededIndexes`` all succeeded (or
    ``succeededCount`` of them), or whose ``succeededCount`` indexes did: "Matched rules at index N"."""
    policy = job["spec"].get("successPolicy")
    if not policy or not succeeded:
        return None
    completions = job["spec"].get("completions") or 0
    for number, rule in enumerate(policy.get("rules") or []):
        count = rule.get("succeededCount")
        if rule.get("succeededIndexes") is not None:
            required = parse_indexes(rule["succeededIndexes"], completions)
            if not required:
                continue
            matched = len(required & succeeded)
            if matched == len(required) or (count is not None and matched >= count):
                return f"Matched rules at index {number}"
        elif count is not None and len(succeeded) >= count:
            return f"Matched rules at index {number}"
    return None

"""What to do with the object a create met under its name (409 AlreadyExists): adopt it, wait it out, or neither.

Workers and triggers create pods, training Jobs and Services under names fixed per task try, so a
create can meet one that the same try made before (a trigger run twice, apache/airflow#37180, or
again after a triggerer restart; a worker running the same try again): that one is adopted. One
whose labels name anything else is never taken (``NotThisTaskTry``).

Nor is one of this try that is being deleted (``metadata.deletionTimestamp``: a Job deleted in
the foreground whose pods are still terminating, a pod in its grace period). A deletion is never
undone: following that object means following something about to vanish, which then reads as a
person's delete, or as a reclaim. Kubernetes keeps the name until the object is gone, and a create
in that window answers 409 ("object is being deleted: ... already exists"), so the caller waits
for it to go and creates it anew, as the StatefulSet controller does with a terminating pod of a
name it needs: the outcome is then the one a create a moment later would have had. The wait is
bounded as the deletions of ``training_job_cluster`` are (``DELETE_WAIT_SECONDS`` and the grace
period of the pods); past it the create fails with ``StillBeingDeleted``, which says what holds
the name. No I/O: the callers (``triggers.cluster``, ``operators.training_job_cluster``) make the calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow_gpu.triggers.pod_replacement import same_task_try
from airflow_gpu.utils.training_job import DELETE_WAIT_SECONDS

#: The grace period of a pod that does not set one (``terminationGracePeriodSeconds``).
DEFAULT_GRACE_SECONDS = 30
#: How often a caller waiting for an object to go reads it again.
GONE_POLL_SECONDS = 1.0


class NotThisTaskTry(RuntimeError):
    """An object of the name this task try would create belongs to something else."""


class StillBeingDeleted(RuntimeError):
    """An object of this task try's, of the name to create, was still being deleted when the wait ended."""


class NameConflict:
    """One create's dealings with the object holding its name: adopt it, or wait (bounded) for it to go.

    The caller creates, and on 409 reads the holder and asks ``adopts``; if not, it reads it again every
    ``GONE_POLL_SECONDS`` while ``holds`` (the same object, still there), then creates again.
    """

    def __init__(self, wanted: Mapping[str, Any], log: Any) -> None:
        self.wanted, self.log = wanted, log
        self.deadline: float | None = None
        self.uid: str | None = None

    def adopts(self, existing: Mapping[str, Any]) -> bool:
        """True for this task try's object; False, the wait started, for one being deleted; ``NotThisTaskTry``
        for anything else's."""
        metadata = existing.get("metadata") or {}
        why_not = same_task_try(dict(existing), dict(self.wanted))
        if why_not:
            raise NotThisTaskTry(f"{_what(existing, self.wanted)} exists and is not this task try's: {why_not}")
        if not metadata.get("deletionTimestamp"):
            return True
        if self.deadline is None:
            self.deadline = time.monotonic() + wait_seconds(self.wanted)
            self.log.warning(
                "%s of this task try is being deleted (since %s): waiting up to %.0f s for it to go, to create it "
                "anew rather than follow it", _what(existing, self.wanted), metadata["deletionTimestamp"],
                wait_seconds(self.wanted),
            )  # fmt: skip
        self.uid = metadata.get("uid")
        return False

    def holds(self, existing: Mapping[str, Any] | None) -> bool:
        """Whether the object waited for still holds the name (read again); ``StillBeingDeleted`` past the wait."""
        if existing is None or (existing.get("metadata") or {}).get("uid") != self.uid:
            return False
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise _still_being_deleted(existing, self.wanted, wait_seconds(self.wanted))
        return True


def wait_seconds(wanted: Mapping[str, Any]) -> float:
    """How long to wait for the object of that name to go: ``DELETE_WAIT_SECONDS`` and the grace period of
    the pods the manifest makes (a pod's own, a Job's template's; none for a Service)."""
    spec = wanted.get("spec") or {}
    kind = wanted.get("kind")
    if kind == "Job":
        spec = (spec.get("template") or {}).get("spec") or {}
    elif kind not in (None, "Pod"):
        return DELETE_WAIT_SECONDS
    grace = spec.get("terminationGracePeriodSeconds")
    return DELETE_WAIT_SECONDS + float(DEFAULT_GRACE_SECONDS if grace is None else grace)


def _still_being_deleted(existing: Mapping[str, Any], wanted: Mapping[str, Any], waited: float) -> StillBeingDeleted:
    metadata = existing.get("metadata") or {}
    finalizers = ", ".join(metadata.get("finalizers") or []) or "none"
    return StillBeingDeleted(
        f"{_what(existing, wanted)} of this task try was still being deleted {waited:.0f} s after a create met it "
        f"(deletionTimestamp {metadata.get('deletionTimestamp')}, finalizers: {finalizers}); it holds the name, so "
        "nothing was created. A Job goes once its pods are gone, a pod once its node confirmed that it stopped"
    )


def _what(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    metadata = {**(wanted.get("metadata") or {}), **(existing.get("metadata") or {})}
    kind = existing.get("kind") or wanted.get("kind") or "Pod"
    namespace = metadata.get("namespace")
    return f"{kind} {namespace}/{metadata.get('name')}" if namespace else f"{kind} {metadata.get('name')}"

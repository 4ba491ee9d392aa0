"""After a deferred task's trigger crashed: whether its next try would take the running work over.

A trigger that raises (a bug, a connection it lost for good) fails the deferral: the task resumes
in ``__fail__`` and Airflow raises ``TaskDeferralError``. The workload runs on: the pod or training
Job the trigger followed, or one it made itself after an interruption. Left alone, it runs beside
the pod or Job the next try creates, or, with no next try, runs on billed with nobody to follow it.

Where the next try would really adopt it, keeping it serves the user (hours of training are not
thrown away): KPO's reattach (``reattach_on_restart``; ``durable`` on Airflow 3.3+) takes over a
pod of the task that is not marked checked, and ``training_job_reattach.take_over`` a Job whose
spot run is still open. That needs a next try: the API server makes one only for a try number no
later than ``max_tries`` (``_is_eligible_to_retry``), and a ``retry_policy`` may still refuse it,
which the worker cannot know beforehand, so a task with one is treated as not retried.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_gpu.operators.pod_marks import CHECKED_LABEL as CHECKED_LABEL
from airflow_gpu.operators.pod_marks import submissions as submissions
from airflow_gpu.operators.retry_rule import why_no_takeover as why_no_takeover

if TYPE_CHECKING:
    from kubernetes.client import models as k8s


def live(pod: k8s.V1Pod) -> bool:
    """Running or pending, not being deleted, not evicted, not marked checked: what KPO reattaches to."""
    status, metadata = pod.status, pod.metadata
    if metadata.deletion_timestamp is not None or (metadata.labels or {}).get(CHECKED_LABEL) == "True":
        return False
    phase = status.phase if status is not None else None
    return phase not in ("Succeeded", "Failed") and (status is None or (status.reason or "").lower() != "evicted")


def latest_live(pods: Iterable[k8s.V1Pod]) -> k8s.V1Pod | None:
    """The pod the next try is to take over: the last one made among those still live."""
    candidates = [pod for pod in pods if live(pod)]
    return max(candidates, key=lambda pod: submissions(pod.metadata.annotations), default=None)

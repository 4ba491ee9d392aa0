"""Which cloud objects are this provider's, and which task try made each: from API dicts, pure.

The marks (nothing without them is ever a candidate, so a plain ``KubernetesPodOperator`` pod or
someone else's Batch job is never touched):

* Kubernetes: the label ``airflow-gpu/accelerator``, which ``GPUKubernetesOperator`` puts on every
  pod it makes (``operators.kubernetes_pod.dress``) and the shared watch selects on; training Jobs
  and their Services carry it too (their manifests are built from that pod), with
  ``airflow-gpu/training-job``. The task try is the ``airflow-gpu/task-instance`` annotation
  (``utils.pod_identity``); a pod made before it existed falls back to KPO's labels, unless
  ``make_safe_label_value`` shortened one (then the try cannot be named, and the pod is skipped).
* AWS Batch: the job tags ``airflow-gpu/dag``, ``/task``, ``/run``, ``/map-index``, ``/try``
  (``accelerators.batch_job.identity_tags``), exact values.

Only live work is a candidate: a pod Pending, Running or Unknown and not being deleted; a Job not
finished and not being deleted; a Batch job not yet SUCCEEDED or FAILED. A training Job's pods
are its Job's (deleting the Job takes them); its Service is a candidate only when its Job is gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.accelerators.batch_job import IDENTITY_TAGS, TRY_TAG
from airflow_gpu.reap.rules import Resource, TaskTry
from airflow_gpu.utils.end_hold import END_HOLD
from airflow_gpu.utils.pod_identity import TASK_ANNOTATION
from airflow_gpu.utils.training_job import JOB_LABEL

#: The label every pod, training Job and Service of the provider carries.
MARKER_LABEL = "airflow-gpu/accelerator"
#: KPO's ``POD_CHECKED_KEY``: a pod no try reattaches to.
CHECKED_LABEL = "already_checked"
#: The server-side selector of candidates: ours, with KPO's task labels.
SELECTOR = f"{MARKER_LABEL},dag_id,task_id,run_id,try_number"
LIVE_POD_PHASES = frozenset({"Pending", "Running", "Unknown"})
LIVE_BATCH_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
#: ``make_safe_label_value``'s mark on a value it changed: ``-`` and 9 hex digits of the original's md5.
_HASHED = re.compile(r"-[0-9a-f]{9}$")


@dataclass(frozen=True)
class Skipped:
    """A marked object whose task try cannot be named: reported, never deleted."""

    backend: str
    kind: str
    name: str
    scope: str
    why: str


def _time(text: str | None) -> datetime:
    if not text:
        return datetime.fromtimestamp(0, timezone.utc)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def kubernetes_task(metadata: Mapping[str, Any]) -> TaskTry | str:
    """The task try that made the object, or why it cannot be told."""
    text = (metadata.get("annotations") or {}).get(TASK_ANNOTATION)
    if text:
        try:
            found = json.loads(text)
            return TaskTry(
                str(found["dag_id"]), str(found["task_id"]), str(found["run_id"]),
                int(found.get("map_index", -1)), int(found["try_number"]),
            )  # fmt: skip
        except (ValueError, TypeError, KeyError):
            return f"its {TASK_ANNOTATION} annotation is not readable: {text[:80]!r}"
    labels = metadata.get("labels") or {}
    shortened = [k for k in ("dag_id", "task_id", "run_id") if _HASHED.search(labels.get(k, ""))]
    if shortened:
        return (
            f"made before airflow-gpu wrote {TASK_ANNOTATION}, and its {', '.join(shortened)} label "
            "was shortened by Kubernetes' 63-character limit: Airflow cannot be asked about it"
        )
    try:
        return TaskTry(
            labels["dag_id"], labels["task_id"], labels["run_id"], int(labels.get("map_index", -1)),
            int(labels["try_number"]),
        )  # fmt: skip
    except (KeyError, ValueError):
        return "its dag_id, task_id, run_id or try_number label is missing or not a number"


def from_kubernetes(
    kind: str, obj: Mapping[str, Any], job_names: frozenset[str] = frozenset()
) -> Resource | Skipped | None:
    """A candidate from a pod, Job or Service (an API dict); None when it is not live or not a candidate.

    :param job_names: the training Jobs that exist in the object's namespace (for a Service).
    """
    metadata, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = metadata.get("labels") or {}
    name, namespace = str(metadata.get("name")), str(metadata.get("namespace"))
    deleting = bool(metadata.get("deletionTimestamp"))
    held = kind == "pod" and END_HOLD in (metadata.get("finalizers") or ())
    if MARKER_LABEL not in labels or (deleting and not held):
        return None
    if kind == "pod":
        owners = {o.get("kind") for o in metadata.get("ownerReferences") or []}
        phase = status.get("phase")
        held = held and (deleting or phase not in LIVE_POD_PHASES)  # a live pod is reaped as one
        if ((JOB_LABEL in labels or "Job" in owners) and not held) or (phase not in LIVE_POD_PHASES and not held):
            return None  # a training Job's live pod goes with its Job; an ended held one is let go here
        live_status = f"{phase}, held ({'being deleted' if deleting else 'ended'})" if held else str(phase)
        adoptable = labels.get(CHECKED_LABEL) != "True" and (not held or phase == "Succeeded")
    elif kind == "job":
        conditions = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        if conditions & {"Complete", "Failed"}:
            return None  # finished: its pods hold nothing; ttlSecondsAfterFinished removes it
        live_status, adoptable = f"active {status.get('active') or 0}", True
    elif kind == "service":
        if labels.get(JOB_LABEL) in job_names:
            return None  # goes with its Job
        live_status, adoptable = "no Job", False
    else:
        raise ValueError(f"unknown kind {kind!r}")
    task = kubernetes_task(metadata)
    if isinstance(task, str):
        return Skipped("kubernetes", kind, name, namespace, task)
    grace = spec.get("terminationGracePeriodSeconds") if kind == "pod" else None
    return Resource(
        "kubernetes", kind, name, namespace, task, _time(metadata.get("creationTimestamp")), live_status,
        adoptable, uid=metadata.get("uid"), grace_seconds=grace, held=held,
    )  # fmt: skip


def from_batch(job: Mapping[str, Any]) -> Resource | Skipped | None:
    """A candidate from a DescribeJobs entry; None when it is not ours or no longer live."""
    tags = job.get("tags") or {}
    if not all(k in tags for k in (*IDENTITY_TAGS, TRY_TAG)) or job.get("status") not in LIVE_BATCH_STATUSES:
        return None
    queue = str(job.get("jobQueue", "")).rsplit("/", 1)[-1]
    dag, task, run, map_index = (tags[k] for k in IDENTITY_TAGS)
    try:
        identity = TaskTry(dag, task, run, int(map_index), int(tags[TRY_TAG]))
    except ValueError:
        return Skipped("batch", "batch-job", str(job["jobId"]), queue, "its map-index or try tag is not a number")
    created = datetime.fromtimestamp(int(job.get("createdAt") or 0) / 1000, timezone.utc)
    return Resource(
        "batch", "batch-job", str(job["jobId"]), queue, identity, created, str(job["status"]), True,
        label=str(job.get("jobName") or ""),
    )  # fmt: skip

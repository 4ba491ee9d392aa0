"""The full history of every pod and Batch job the soak's tasks make, for ``invariants``.

Pods: every change the Kubernetes emulator's store makes is handed to a listener (``Store.subscribe``),
so nothing is sampled: a pod's creation, each phase, its deletion request and its removal are each
recorded with the time they happened. The two-machine trainings' Jobs and headless Services are
followed the same way (``objects``): created, and deleted (deletion requested); a training pod
carries its Job's name (``group``), for its ranks live together.

Batch jobs (moto's objects) have no such hook: they are read every ``interval`` seconds in-process
(no API request counted), so a job's end is known to that interval; ``invariants`` allows for it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.accelerators.batch_job import TRY_TAG
from airflow_gpu.spot.classifier import finished_with_result
from airflow_gpu.spot.training_job import judged
from airflow_gpu.utils.pod_identity import TASK_ANNOTATION
from airflow_gpu.utils.training_job import JOB_LABEL

#: (dag_id, task_id, run_id, map_index, try_number)
TryKey = tuple[str, str, str, int, int]
LIVE_BATCH = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")


@dataclass
class Workload:
    """One pod or Batch job: whose try it is and when it lived."""

    backend: str
    name: str
    key: TryKey | None
    created: float
    running: float | None = None
    ended: float | None = None  # Succeeded/Failed, deletion requested or removed: no longer live
    outcome: str | None = None  # Succeeded, Failed, deleted, or the Batch status
    node: str | None = None
    statuses: list[tuple[float, str]] = field(default_factory=list)
    marks: dict[str, Any] = field(default_factory=dict)  # a pod's labels and annotations, as first seen
    group: str | None = None  # the training Job a pod is a machine of (its ranks are live together)
    deleted: float | None = None  # when its deletion was requested or it was removed (after ``ended`` too)
    #: A pod whose workload printed its result and exited 0 of its own accord (the profiler's end line in its
    #: termination message: ``classifier.finished_with_result``), even where its deletion was asked first: a
    #: training's main machine deleted by its Job's controller, once another machine failed, while it exited.
    finished: bool = False

    @property
    def finished_at(self) -> float | None:
        """When a ``finished`` pod was seen ``Succeeded``: a success, for ``no_start_after_success`` too."""
        return next((at for at, phase in self.statuses if phase == "Succeeded"), None) if self.finished else None

    @property
    def instance(self) -> tuple[str, str, str, int] | None:
        return None if self.key is None else self.key[:4]


def pod_key(metadata: dict[str, Any]) -> TryKey | None:
    text = (metadata.get("annotations") or {}).get(TASK_ANNOTATION)
    if not text:
        return None
    try:
        found = json.loads(text)
        return (found["dag_id"], found["task_id"], found["run_id"], int(found.get("map_index", -1)),
                int(found["try_number"]))  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


def job_key(tags: dict[str, str]) -> TryKey | None:
    try:
        return (tags["airflow-gpu/dag"], tags["airflow-gpu/task"], tags["airflow-gpu/run"],
                int(tags["airflow-gpu/map-index"]), int(tags[TRY_TAG]))  # fmt: skip
    except (KeyError, ValueError):
        return None


class Observer:
    """``pods`` and ``jobs`` by name (a pod's uid), filled as the clusters change."""

    def __init__(self, kubernetes: Any, batch: Any, interval: float = 0.5) -> None:
        self.kubernetes, self.batch, self.interval = kubernetes, batch, interval
        self.pods: dict[str, Workload] = {}
        self.jobs: dict[str, Workload] = {}
        #: Kubernetes Jobs and Services of the trainings, by uid (backend ``job`` or ``service``).
        self.objects: dict[str, Workload] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_batch, name="soak-observer", daemon=True)

    def start(self) -> Observer:
        state = self.kubernetes.state
        self.kubernetes._sync(state.store.subscribe, self._on_change)
        self._thread.start()
        return self

    def close(self) -> None:
        """The history ends here: pods made later (the forced orphan) are not the soak's tasks'."""
        self.stop.set()
        self._thread.join(timeout=10)
        self._poll_batch_once()

    # --- pods: every change, in the emulator's loop -----------------------------------------

    def _on_change(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        if plural not in ("pods", "jobs", "services") or self.stop.is_set():
            return
        metadata = obj.get("metadata") or {}
        if "airflow-gpu/accelerator" not in (metadata.get("labels") or {}):
            return
        now = time.time()
        uid = str(metadata.get("uid"))
        if plural != "pods":
            self._on_object(plural[:-1], event, obj, uid, now)
            return
        with self.lock:
            pod = self.pods.get(uid)
            if pod is None:
                pod = self.pods[uid] = Workload("kubernetes", str(metadata.get("name")), pod_key(metadata), now)
                pod.marks = {"labels": dict(metadata.get("labels") or {}),
                             "annotations": dict(metadata.get("annotations") or {})}  # fmt: skip
                pod.group = (metadata.get("labels") or {}).get(JOB_LABEL)
            phase = (obj.get("status") or {}).get("phase") or "Pending"
            pod.node = (obj.get("spec") or {}).get("nodeName") or pod.node
            if not pod.statuses or pod.statuses[-1][1] != phase:
                pod.statuses.append((now, phase))
            if phase == "Running" and pod.running is None:
                pod.running = now
            gone = event == "DELETED" or bool(metadata.get("deletionTimestamp"))
            if pod.ended is None:
                if phase in ("Succeeded", "Failed"):
                    pod.ended, pod.outcome = now, phase
                elif gone:
                    pod.ended, pod.outcome = now, "deleted"
            if gone and pod.deleted is None:
                pod.deleted = now
            if phase == "Succeeded" and not pod.finished:
                pod.finished = finished_with_result(obj)

    def _on_object(self, kind: str, event: str, obj: dict[str, Any], uid: str, now: float) -> None:
        """A training's Job or Service: live from its creation until its deletion is requested. A Job its
        controller judged (``Complete`` or ``Failed``) holds nothing more, nor does its Service: a kill keeps
        such a Job for the task that reads it (``kill_spare``), and ``ttlSecondsAfterFinished`` removes it."""
        metadata = obj.get("metadata") or {}
        with self.lock:
            seen = self.objects.get(uid)
            if seen is None:
                seen = self.objects[uid] = Workload(kind, str(metadata.get("name")), pod_key(metadata), now)
                seen.group = (metadata.get("labels") or {}).get(JOB_LABEL)
            if kind == "job" and judged(obj) and seen.outcome is None:
                seen.outcome = "judged"
            if (event == "DELETED" or metadata.get("deletionTimestamp")) and seen.ended is None:
                seen.ended = seen.deleted = now
                seen.outcome = "deleted"

    # --- Batch jobs: read in-process every interval ------------------------------------------

    def _poll_batch(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self._poll_batch_once()
            except Exception:  # a job changing under the read: the next round sees it
                continue

    def _poll_batch_once(self) -> None:
        now = time.time()
        for job in list(self.batch.jobs()):
            status = str(job.status)
            with self.lock:
                seen = self.jobs.get(job.job_id)
                if seen is None:
                    created = job.job_created_at.timestamp() if getattr(job, "job_created_at", None) else now
                    tags = self.batch.driver.backend.list_tags_for_resource(job.arn)
                    seen = self.jobs[job.job_id] = Workload("batch", job.job_id, job_key(tags), created)
                if not seen.statuses or seen.statuses[-1][1] != status:
                    seen.statuses.append((now, status))
                if status == "RUNNING" and seen.running is None:
                    seen.running = now
                if status not in LIVE_BATCH and seen.ended is None:
                    seen.ended, seen.outcome = now, status

    # --- reads ------------------------------------------------------------------------------

    def recovery(self, backend: str, key: TryKey | None, at: float, name: str) -> float | None:
        """When the try hit at ``at`` ran again: another pod of it Running, or the Batch job RUNNING
        again after leaving RUNNING (Batch's own retry) or another job of the try RUNNING."""
        if key is None:
            return None
        with self.lock:
            if backend == "batch":
                job = self.jobs.get(name)
                if job is not None:
                    left = next((t for t, s in job.statuses if t > at and s != "RUNNING"), None)
                    again = left and next((t for t, s in job.statuses if t > left and s == "RUNNING"), None)
                    if again:
                        return again
            items = self.jobs.values() if backend == "batch" else self.pods.values()
            later = [w.running for w in items if w.key == key and w.name != name and w.running and w.running > at]
        return min(later) if later else None

    def workloads(self) -> list[Workload]:
        with self.lock:
            return [*self.pods.values(), *self.jobs.values()]

    def live_pods(self) -> list[Workload]:
        with self.lock:
            return [p for p in self.pods.values() if p.ended is None]

    def live_jobs(self) -> list[Workload]:
        with self.lock:
            return [j for j in self.jobs.values() if j.ended is None]

    def training_objects(self) -> list[Workload]:
        """The trainings' Kubernetes Jobs and Services seen so far."""
        with self.lock:
            return list(self.objects.values())

    def live_objects(self) -> list[Workload]:
        """Jobs and Services not deleted, less a judged Job and its Service (``_on_object``)."""
        with self.lock:
            judged_groups = {o.group for o in self.objects.values() if o.backend == "job" and o.outcome == "judged"}
            return [o for o in self.objects.values() if o.ended is None and o.group not in judged_groups]

    def unread_successes(self, within: float) -> list[Workload]:
        """Pods that ended ``Succeeded`` in the last ``within`` seconds and that their task has not
        deleted yet: the task is still reading them (its end, its log, its result)."""
        now = time.time()
        with self.lock:
            return [
                p for p in self.pods.values()
                if p.outcome == "Succeeded" and p.deleted is None and p.ended is not None and now - p.ended <= within
            ]  # fmt: skip

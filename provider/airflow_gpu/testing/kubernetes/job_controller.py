"""The Job controller of Kubernetes 1.33 (``pkg/controller/job/job_controller.go``), on the emulator's loop.

It runs a Job's pods and keeps its status as the real controller does, one ``sync`` at a time:

* pods come from the template with ``generateName`` ``<job>-`` (``<job>-<index>-`` for Indexed
  Jobs, which also get the ``batch.kubernetes.io/job-completion-index`` annotation and label,
  ``spec.hostname: <job>-<index>`` and ``JOB_COMPLETION_INDEX`` from the downward API in every
  container and init container), a controller ``ownerReference`` and the
  ``batch.kubernetes.io/job-tracking`` finalizer, removed once the pod is counted;
* up to ``parallelism`` pods run (never more than the completions left); a failed pod is replaced
  after the controller's exponential back-off (10 s, 20 s, ... capped at 10 minutes), and a pod
  being deleted counts as failed at once and is replaced at once, unless ``podReplacementPolicy``
  is ``Failed`` (the default with a ``podFailurePolicy``), which waits until it is ``Failed``;
* ``podFailurePolicy`` rules (``FailJob``, ``Ignore``, ``Count``, ``FailIndex``; ``onExitCodes``
  and ``onPodConditions``) decide whether a failure counts against ``backoffLimit``, or, with
  ``backoffLimitPerIndex``, against its index's limit (the ``job-index-failure-count`` and
  ``job-index-ignored-failure-count`` annotations, ``failedIndexes``, ``maxFailedIndexes``, each
  index with its own back-off);
* status: ``startTime``, ``active``, ``ready``, ``terminating``, ``succeeded``, ``failed``,
  ``completedIndexes`` ("0,1" for two indexes, "0-2" for three: ``orderedIntervals.String``),
  ``uncountedTerminatedPods``, and the conditions: ``SuccessCriteriaMet`` then ``Complete``
  (reason ``CompletionsReached``) with ``completionTime``, or ``FailureTarget`` then ``Failed``
  (``BackoffLimitExceeded``, ``DeadlineExceeded``, ``PodFailurePolicy``, and with a per-index
  limit ``FailedIndexes`` or ``MaxFailedIndexesExceeded``); since 1.31 the terminal condition
  waits until no pod of the Job is terminating;
* ``suspend``, ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` (the TTL controller's
  foreground deletion);
* a pod create the API refuses (a ResourceQuota, a LimitRange: ``admission``) is a ``FailedCreate``
  Warning event on the Job, ``Error creating: pods "<job>-0-x7k2p" is forbidden: exceeded quota:
  ...``; creates go in slow-start batches (1, 2, 4, ...: ``SlowStartInitialBatchSize``) and stop
  after a batch with a refusal; the sync then fails and the Job is synced again after the work
  queue's per-item exponential back-off (``DefaultJobApiBackOff`` 1 s doubled per failed sync up to
  ``MaxJobApiBackOff`` 1 min, reset by a sync that succeeds), or sooner when one of its pods
  changes. No condition is set and nothing times out: a Job whose pods are all refused stays
  without pods and without status until they are admitted or it is deleted.

``successPolicy`` ends an Indexed Job early (``SuccessCriteriaMet`` reason ``SuccessPolicy``, the
lingering pods deleted). Not emulated: ``managedBy``, adopting orphan pods that match a manual selector,
and, with ``backoffLimitPerIndex``, keeping a failed pod's finalizer until its replacement exists
(the controller keeps the counts instead).
"""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_gpu.testing.kubernetes.deletion import DeleteOptions
from airflow_gpu.testing.kubernetes.job_pods import (
    INDEX_FAILURE_COUNT,
    INDEX_IGNORED_FAILURE_COUNT,
    JOB_TRACKING_FINALIZER,
    IndexFailures,
    after_failure,
    completion_index,
    condition,
    controller_of,
    finished_at,
    format_indexes,
    has_tracking_finalizer,
    index_failed,
    is_active,
    is_finished,
    is_pod_failed,
    is_ready,
    is_terminating,
    match_pod_failure_policy,
    only_replace_failed,
    parse_indexes,
    parse_time,
    progress,
    success_policy_met,
)
from airflow_gpu.testing.kubernetes.job_spec import COMPLETION_INDEX
from airflow_gpu.testing.kubernetes.objects import MAX_GENERATED_NAME_LENGTH, ApiError, now, timestamp
from airflow_gpu.testing.kubernetes.store import Obj

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.cluster_state import ClusterState

COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
COMPONENT = "job-controller"
#: ``DefaultJobPodFailureBackOff`` and ``MaxJobPodFailureBackOff`` (the docs say "capped at six
#: minutes"; the source caps at ten).
DEFAULT_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_FACTOR = 60
#: ``DefaultJobApiBackOff`` and ``MaxJobApiBackOff``: the work queue's back-off after a sync that
#: failed (a refused pod create), doubled per failure.
DEFAULT_API_BACKOFF_SECONDS = 1.0
MAX_API_BACKOFF_SECONDS = 60.0
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
COMPLETIONS_MESSAGE = "Reached expected number of succeeded pods"


def _new_condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    stamp = timestamp()
    entry: dict[str, Any] = {"type": kind, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp}
    if reason:
        entry["reason"] = reason
    if message:
        entry["message"] = message
    return entry


class JobController:
    """Keeps every Job's pods and status in step, from store events (pods and jobs) and timers."""

    def __init__(
        self,
        state: ClusterState,
        backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
        api_backoff_seconds: float = DEFAULT_API_BACKOFF_SECONDS,
    ) -> None:
        self.state = state
        self.backoff_seconds = backoff_seconds
        #: The first retry's delay after a refused create (tests shorten it); the cap scales with it.
        self.api_backoff_seconds = api_backoff_seconds
        self._api_failures: dict[str, int] = {}  # job uid -> failed syncs in a row (the rate limiter's count)
        self._pods: dict[str, set[tuple[str, str]]] = {}  # job uid -> its pods (namespace, name)
        self._owner: dict[tuple[str, str], str] = {}  # pod -> job uid
        self._backoff: dict[str, tuple[int, datetime | None]] = {}  # job uid -> (failures since success, last)
        self._index_failures: dict[tuple[str, int], IndexFailures] = {}  # (job uid, index) -> its failures
        self._queue: set[tuple[str, str]] = set()
        self._orphans: set[tuple[str, str]] = set()
        self._scheduled = False
        self._timers: dict[tuple[str, str, str], asyncio.TimerHandle] = {}
        state.store.subscribe(self._observe)

    # --- informers --------------------------------------------------------------------------

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        metadata = obj["metadata"]
        if plural == "jobs":
            key = (metadata["namespace"], metadata["name"])
            if event == "DELETED":
                self._orphans.update(self._pods.get(metadata["uid"], ()))  # cleanupPodFinalizers
                self._forget(metadata["uid"])
            self._enqueue(key)
        elif plural == "pods":
            key = (metadata["namespace"], metadata["name"])
            reference = controller_of(obj)
            is_job = (
                reference is not None and reference.get("kind") == "Job" and reference.get("apiVersion") == "batch/v1"
            )
            uid = reference["uid"] if is_job and reference is not None else None
            previous = self._owner.get(key)
            if previous is not None and (previous != uid or event == "DELETED"):
                self._pods.get(previous, set()).discard(key)
                del self._owner[key]
            if uid is not None and event != "DELETED":
                self._pods.setdefault(uid, set()).add(key)
                self._owner[key] = uid
            if uid is not None and reference is not None:
                self._enqueue((metadata["namespace"], reference["name"]))
            elif event != "DELETED" and JOB_TRACKING_FINALIZER in (metadata.get("finalizers") or ()):
                self._orphans.add(key)  # no controller (orphaned): syncOrphanPod
                self._schedule()

    def _enqueue(self, key: tuple[str, str]) -> None:
        self._queue.add(key)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _later(self, job: Obj, what: str, delay: float) -> None:
        metadata = job["metadata"]
        key = (metadata["namespace"], metadata["name"], what)
        if key in self._timers:
            self._timers[key].cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(delay, 0.0), self._fire, key)

    def _fire(self, key: tuple[str, str, str]) -> None:
        self._timers.pop(key, None)
        if key[2] == "ttl":
            self._expire(key[0], key[1])
        else:
            self._enqueue((key[0], key[1]))

    def _run(self) -> None:
        self._scheduled = False
        orphans, self._orphans = self._orphans, set()
        for namespace, name in sorted(orphans):
            self._release_orphan(namespace, name)
        queued, self._queue = self._queue, set()
        for namespace, name in sorted(queued):
            job = self.state.store.find("jobs", namespace, name)
            if job is not None:
                self.sync(job)

    def _release_orphan(self, namespace: str, name: str) -> None:
        """``syncOrphanPod``: a pod whose Job is gone, finished or not its controller loses the finalizer."""
        pod = self.state.store.find("pods", namespace, name)
        if pod is None or not has_tracking_finalizer(pod):
            return
        reference = controller_of(pod)
        if reference is not None and reference.get("kind") == "Job" and reference.get("apiVersion") == "batch/v1":
            job = self.state.store.find("jobs", namespace, reference.get("name", ""))
            if job is not None and job["metadata"]["uid"] == reference.get("uid") and not is_finished(job):
                return  # still tracked by a running Job
        elif reference is not None:
            return  # another kind's pod: not ours to touch
        self.state.remove_finalizer("pods", pod, JOB_TRACKING_FINALIZER)

    # --- syncJob ----------------------------------------------------------------------------

    def _pods_of(self, job: Obj) -> list[Obj]:
        namespace, uid = job["metadata"]["namespace"], job["metadata"]["uid"]
        pods = (self.state.store.find("pods", *key) for key in sorted(self._pods.get(uid, ())))
        return [p for p in pods if p is not None and p["metadata"]["namespace"] == namespace]

    def sync(self, job: Obj) -> None:
        if is_finished(job):
            for pod in self._pods_of(job):  # the backup cleanup of updateJob
                if has_tracking_finalizer(pod):
                    self.state.remove_finalizer("pods", pod, JOB_TRACKING_FINALIZER)
            self._schedule_ttl(job)
            return
        before = copy.deepcopy(job.get("status") or {})
        status = job.setdefault("status", {})
        spec, metadata = job["spec"], job["metadata"]
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        suspended = spec.get("suspend") is True
        pods = self._pods_of(job)
        active_pods = [p for p in pods if is_active(p)]
        terminating = sum(1 for p in pods if is_terminating(p))
        ready = sum(1 for p in active_pods if is_ready(p))

        def valid(pod: Obj) -> bool:
            return not indexed or 0 <= completion_index(pod) < (completions or 0)

        tracked = [p for p in pods if has_tracking_finalizer(p) and valid(p)]
        new_succeeded = [p for p in tracked if p["status"].get("phase") == "Succeeded"]
        new_failed = [p for p in tracked if is_pod_failed(p, job)]
        counted_failures = sum(1 for p in new_failed if match_pod_failure_policy(job, p)[1])
        succeeded = status.get("succeeded", 0) + len(new_succeeded)
        failed = status.get("failed", 0) + counted_failures
        if status.get("startTime") is None and not suspended:
            status["startTime"] = timestamp()
        self._record_backoff(metadata["uid"], new_succeeded, new_failed)
        succeeded_indexes: set[int] = set()
        if indexed:
            succeeded_indexes = parse_indexes(status.get("completedIndexes"), completions or 0)
            succeeded_indexes |= {completion_index(p) for p in new_succeeded}
            succeeded = len(succeeded_indexes)
        failed_indexes: set[int] = set()
        if indexed and spec.get("backoffLimitPerIndex") is not None:
            failed_indexes = self._failed_indexes(job, new_failed, succeeded_indexes)
        finished = self._finished_condition(job, pods, failed, succeeded_indexes, failed_indexes)
        if finished is None and indexed and (message := success_policy_met(job, succeeded_indexes)):
            finished = _new_condition("SuccessCriteriaMet", "SuccessPolicy", message)
        suspend_changed = False
        if finished is not None:
            deleted_ready, deleted = self._delete_pods(job, active_pods, keep_finalizer=True)
            active = len(active_pods) - deleted
            terminating += deleted
            ready -= deleted_ready
        else:
            active, managed = len(active_pods), False
            if not metadata.get("deletionTimestamp"):
                active, terminating, ready = self._manage(
                    job, active_pods, succeeded, succeeded_indexes | failed_indexes, terminating, ready
                )
                managed = True
            done = (
                (succeeded > 0 and active == 0) if completions is None else (succeeded >= completions and active == 0)
            )
            if done:
                finished = _new_condition("SuccessCriteriaMet", "CompletionsReached", COMPLETIONS_MESSAGE)
            elif managed:
                suspend_changed = self._suspend_condition(job, suspended)
        status["active"], status["ready"], status["terminating"] = active, ready, terminating
        failed_ids = {id(p) for p in new_failed}  # as the pods were: those deleted just now are not failed yet
        self._track(job, tracked, failed_ids, finished, succeeded_indexes, terminating, before, suspend_changed)

    def _failed_indexes(self, job: Obj, new_failed: list[Obj], succeeded: set[int]) -> set[int]:
        """``backoffLimitPerIndex``: record each index's failures (for its replacement's annotations
        and back-off) and mark the indexes that used up their limit or matched ``FailIndex``."""
        status, uid = job["status"], job["metadata"]["uid"]
        failed = parse_indexes(status.get("failedIndexes"), job["spec"].get("completions") or 0)
        for pod in new_failed:
            index = completion_index(pod)
            _, counted, action = match_pod_failure_policy(job, pod)
            self._index_failures[(uid, index)] = after_failure(pod, counted)
            if index not in succeeded and index_failed(job, pod, counted, action):
                failed.add(index)
        status["failedIndexes"] = format_indexes(failed)
        return failed

    def _finished_condition(
        self, job: Obj, pods: list[Obj], failed: int, succeeded_indexes: set[int], failed_indexes: set[int]
    ) -> dict[str, Any] | None:
        """What ends the Job, if anything: a condition already set or a limit reached now."""
        met = condition(job, "SuccessCriteriaMet")
        if met is not None:
            return met
        target = condition(job, "FailureTarget")
        if target is not None:
            return target
        for pod in pods:
            if is_pod_failed(pod, job):
                message, _, _ = match_pod_failure_policy(job, pod)
                if message is not None:
                    return _new_condition("FailureTarget", "PodFailurePolicy", message)
        spec, status = job["spec"], job["status"]
        if failed > spec.get("backoffLimit", 6) or self._past_backoff_on_failure(job, pods):
            return _new_condition("FailureTarget", "BackoffLimitExceeded", BACKOFF_LIMIT_MESSAGE)
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_time(status.get("startTime"))
        if deadline is not None and started is not None and spec.get("suspend") is not True:
            left = deadline - (now() - started).total_seconds()
            if left <= 0:
                return _new_condition("FailureTarget", "DeadlineExceeded", DEADLINE_MESSAGE)
            self._later(job, "deadline", left)
        if failed_indexes:
            maximum = spec.get("maxFailedIndexes")
            if maximum is not None and len(failed_indexes) > maximum:
                message = "Job has exceeded the specified maximal number of failed indexes"
                return _new_condition("FailureTarget", "MaxFailedIndexesExceeded", message)
            if len(failed_indexes) + len(succeeded_indexes) >= (spec.get("completions") or 0):
                return _new_condition("FailureTarget", "FailedIndexes", "Job has failed indexes")
        return None

    @staticmethod
    def _past_backoff_on_failure(job: Obj, pods: list[Obj]) -> bool:
        """``pastBackoffLimitOnFailure``: container restarts of running pods (restartPolicy OnFailure)."""
        if job["spec"]["template"]["spec"].get("restartPolicy") != "OnFailure":
            return False
        restarts = sum(
            s.get("restartCount", 0)
            for p in pods
            if p["status"].get("phase") in ("Running", "Pending")
            for s in (p["status"].get("initContainerStatuses") or []) + (p["status"].get("containerStatuses") or [])
        )
        limit = int(job["spec"].get("backoffLimit", 6))
        return bool(restarts > 0 if limit == 0 else restarts >= limit)

    def _suspend_condition(self, job: Obj, suspended: bool) -> bool:
        """``ensureJobConditionStatus`` for ``Suspended`` (never added as False); resuming resets startTime."""
        status = job["status"]
        current = next((c for c in status.get("conditions") or [] if c.get("type") == "Suspended"), None)
        wanted = ("True", "JobSuspended", "Job suspended") if suspended else ("False", "JobResumed", "Job resumed")
        if current is None and not suspended:
            return False
        if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == wanted:
            return False
        entry = _new_condition("Suspended", wanted[1], wanted[2])
        entry["status"] = wanted[0]
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Suspended"] + [entry]
        self.state.record_event(job, "Normal", "Suspended" if suspended else "Resumed", wanted[2], COMPONENT)
        if not suspended:
            status["startTime"] = timestamp()
        return True

    # --- manageJob --------------------------------------------------------------------------

    def _manage(
        self,
        job: Obj,
        active_pods: list[Obj],
        succeeded: int,
        finished_indexes: set[int],
        terminating: int,
        ready: int,
    ) -> tuple[int, int, int]:
        """Create or delete pods towards the wanted number; returns (active, terminating, ready).
        ``finished_indexes`` are the succeeded and (with a per-index limit) the failed ones."""
        spec = job["spec"]
        active = len(active_pods)
        if spec.get("suspend") is True:
            deleted_ready, deleted = self._delete_pods(job, active_pods)
            return active - deleted, terminating + deleted, ready - deleted_ready
        parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
        if completions is None:
            wanted = active if succeeded > 0 else parallelism
        else:
            wanted = max(0, min(completions - succeeded, parallelism))
        excess = self._pods_for_removal(job, active_pods, max(0, active - wanted))
        if excess:
            deleted_ready, deleted = self._delete_pods(job, excess)
            return active - deleted, terminating + deleted, ready - deleted_ready
        missing = wanted - (terminating if only_replace_failed(job) else 0) - active
        if missing <= 0:
            return active, terminating, ready
        per_index = spec.get("backoffLimitPerIndex") is not None
        left = 0.0 if per_index else self._backoff_left(job["metadata"]["uid"])
        if left > 0:
            self._later(job, "backoff", left)
            return active, terminating, ready
        indexes: list[int | None] = [None] * missing
        if spec.get("completionMode") == "Indexed":
            taken = finished_indexes | {completion_index(p) for p in active_pods}
            pending: list[int | None] = [i for i in range(completions or 0) if i not in taken]  # firstPendingIndexes
            if per_index:  # getPodCreationInfoForIndependentIndexes: each index its own back-off
                waits = {i: self._index_backoff_left(job["metadata"]["uid"], i) for i in pending if i is not None}
                pending = [i for i in pending if i is not None and waits[i] <= 0]
                later = [w for w in waits.values() if w > 0]
                if later:
                    self._later(job, "backoff", min(later))
            indexes = pending[:missing]
        created, refused = self._create_pods(job, indexes)
        uid = job["metadata"]["uid"]
        if refused:  # the sync failed: ``queue.AddRateLimited``
            failures = self._api_failures.get(uid, 0)
            self._api_failures[uid] = failures + 1
            cap = self.api_backoff_seconds * (MAX_API_BACKOFF_SECONDS / DEFAULT_API_BACKOFF_SECONDS)
            self._later(job, "api", min(self.api_backoff_seconds * 2.0**failures, cap))
        else:  # ``queue.Forget``
            self._api_failures.pop(uid, None)
        return active + created, terminating, ready

    def _create_pods(self, job: Obj, indexes: list[int | None]) -> tuple[int, int]:
        """Slow start (``manageJob``): batches of 1, 2, 4, ...; none after a batch with a refusal.
        Returns (created, refused)."""
        created = refused = start = 0
        batch = 1  # controller.SlowStartInitialBatchSize
        while start < len(indexes) and not refused:
            results = [self._create_pod(job, index) for index in indexes[start : start + batch]]
            created += sum(results)
            refused += len(results) - sum(results)
            start += batch
            batch *= 2
        return created, refused

    @staticmethod
    def _pods_for_removal(job: Obj, active_pods: list[Obj], at_least: int) -> list[Obj]:
        """``activePodsForRemoval``: duplicated or out-of-range indexes, then the least advanced pods."""
        remove: list[Obj] = []
        left = list(active_pods)
        if job["spec"].get("completionMode") == "Indexed":
            completions, seen, left = job["spec"].get("completions") or 0, set(), []
            # appendDuplicatedIndexPodsForRemoval keeps the most advanced pod of an index
            for pod in sorted(active_pods, key=lambda p: (completion_index(p), *progress(p, descending=True))):
                index = completion_index(pod)
                if index < 0 or index >= completions or index in seen:
                    remove.append(pod)
                else:
                    seen.add(index)
                    left.append(pod)
        if len(remove) < at_least:
            left.sort(key=progress)  # controller.ActivePods: unscheduled < pending < running, not ready < ready
            remove += left[: at_least - len(remove)]
        return remove

    def _create_pod(self, job: Obj, index: int | None) -> bool:
        """``CreatePodsWithGenerateName`` from the template; an Event either way."""
        metadata = job["metadata"]
        template = copy.deepcopy(job["spec"]["template"])
        pod_metadata = template.get("metadata") or {}
        spec = template["spec"]
        generate_name = f"{metadata['name']}-"
        if index is not None:
            for kind in ("initContainers", "containers"):
                for container in spec.get(kind) or []:
                    env = container.setdefault("env", [])
                    if not any(e.get("name") == COMPLETION_INDEX_ENV for e in env):
                        field_path = f"metadata.labels['{COMPLETION_INDEX}']"
                        env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": field_path}}})
            pod_metadata.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
            pod_metadata.setdefault("labels", {})[COMPLETION_INDEX] = str(index)
            spec["hostname"] = f"{metadata['name']}-{index}"
            if job["spec"].get("backoffLimitPerIndex") is not None:  # addIndexFailureCountAnnotation
                record = self._index_failures.get((metadata["uid"], index))
                pod_metadata["annotations"][INDEX_FAILURE_COUNT] = str(record.counted if record else 0)
                if record and record.ignored:
                    pod_metadata["annotations"][INDEX_IGNORED_FAILURE_COUNT] = str(record.ignored)
            suffix = f"-{index}-"
            generate_name = metadata["name"] + suffix
            if len(generate_name) > MAX_GENERATED_NAME_LENGTH:  # podGenerateNameWithIndex
                generate_name = generate_name[: MAX_GENERATED_NAME_LENGTH - len(suffix)] + suffix
        pod = {
            "metadata": {
                "generateName": generate_name,
                "labels": pod_metadata.get("labels") or {},
                "annotations": pod_metadata.get("annotations") or {},
                "finalizers": [*(pod_metadata.get("finalizers") or []), JOB_TRACKING_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        try:
            created = self.state.create_pod(metadata["namespace"], pod)
        except ApiError as error:
            self.state.record_event(job, "Warning", "FailedCreate", f"Error creating: {error.message}", COMPONENT)
            return False
        self.state.record_event(
            job, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}", COMPONENT
        )
        return True

    def _delete_pods(self, job: Obj, pods: list[Obj], keep_finalizer: bool = False) -> tuple[int, int]:
        """``deleteJobPods`` (excess pods lose the finalizer first, so they are not counted) or
        ``deleteActivePods`` (the Job failed or succeeded: they are counted as they go)."""
        ready = 0
        for pod in pods:
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            if not keep_finalizer and has_tracking_finalizer(pod):
                self.state.remove_finalizer("pods", pod, JOB_TRACKING_FINALIZER)
            ready += is_ready(pod)
            if self.state.store.find("pods", namespace, name) is not None:
                self.state.delete_object("pods", namespace, name, DeleteOptions())
                self.state.record_event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {name}", COMPONENT)
        return ready, len(pods)

    # --- trackJobStatusAndRemoveFinalizers ----------------------------------------------------

    def _track(
        self,
        job: Obj,
        tracked: list[Obj],
        failed_ids: set[int],
        finished: dict[str, Any] | None,
        succeeded_indexes: set[int],
        terminating: int,
        before: dict[str, Any],
        changed: bool,
    ) -> None:
        status, metadata = job["status"], job["metadata"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        failing = finished is not None and finished["type"] in ("FailureTarget", "Failed")
        released: list[Obj] = []
        for pod in tracked:
            if not has_tracking_finalizer(pod):  # an excess pod, released before its deletion: not counted
                continue
            failed_pod = id(pod) in failed_ids
            succeeded_pod = pod["status"].get("phase") == "Succeeded"
            if not (metadata.get("deletionTimestamp") or finished or succeeded_pod or failed_pod):
                continue
            released.append(pod)
            if succeeded_pod:
                if not indexed:
                    status["succeeded"] = status.get("succeeded", 0) + 1
            elif (failed_pod or failing) and match_pod_failure_policy(job, pod)[1]:
                status["failed"] = status.get("failed", 0) + 1
        if indexed:
            status["succeeded"] = len(succeeded_indexes)
            status["completedIndexes"] = format_indexes(succeeded_indexes)
        status["uncountedTerminatedPods"] = {}
        final = self._add_conditions(job, finished)
        enacted = final is not None and terminating == 0
        if enacted and final is not None:
            status["conditions"] = [*status.get("conditions", []), final]
            if final["type"] == "Complete":
                status["completionTime"] = final["lastTransitionTime"]
        for key in ("active", "succeeded", "failed", "completedIndexes"):
            if not status.get(key):
                status.pop(key, None)
        if changed or status != before:
            self.state.store.update("jobs", job)
        for pod in released:
            current = self.state.store.find("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
            if current is not None and has_tracking_finalizer(current):
                self.state.remove_finalizer("pods", current, JOB_TRACKING_FINALIZER)
        if enacted and final is not None:
            if final["type"] == "Complete":
                self.state.record_event(job, "Normal", "Completed", "Job completed", COMPONENT)
            else:
                self.state.record_event(job, "Warning", final.get("reason", ""), final.get("message", ""), COMPONENT)
            self._forget(metadata["uid"])
            self._schedule_ttl(job)

    @staticmethod
    def _add_conditions(job: Obj, finished: dict[str, Any] | None) -> dict[str, Any] | None:
        """Append the interim condition once; return the terminal condition it leads to."""
        if finished is None:
            return None
        status = job["status"]
        conditions = status.setdefault("conditions", [])
        if finished["type"] in ("FailureTarget", "SuccessCriteriaMet") and condition(job, finished["type"]) is None:
            conditions.append(finished)
        final_type = "Complete" if finished["type"] == "SuccessCriteriaMet" else "Failed"
        return _new_condition(final_type, finished.get("reason", ""), finished.get("message", ""))

    # --- back-off and TTL -------------------------------------------------------------------

    def _record_backoff(self, uid: str, succeeded: list[Obj], failed: list[Obj]) -> None:
        """``newBackoffRecord``: failures since the last success and when the last one happened."""
        count, last = self._backoff.get(uid, (0, None))
        failures = sorted(finished_at(p) for p in failed)
        if not succeeded:
            if failures:
                count, last = count + len(failures), failures[-1]
        else:
            latest_success = max(finished_at(p) for p in succeeded)
            after = [t for t in failures if t > latest_success]
            count, last = len(after), (after[-1] if after else None)
        self._backoff[uid] = (count, last)

    def _backoff_left(self, uid: str) -> float:
        count, last = self._backoff.get(uid, (0, None))
        return self._delay_left(count, last)

    def _index_backoff_left(self, uid: str, index: int) -> float:
        """``getRemainingTimePerIndex``: the back-off of the index's own failures, counted or not."""
        record = self._index_failures.get((uid, index))
        return 0.0 if record is None else self._delay_left(record.total, record.at)

    def _delay_left(self, failures: int, last: datetime | None) -> float:
        """``getRemainingTimeForFailuresCount``: 10 s doubled per failure, capped, minus the time since."""
        if failures == 0 or last is None:
            return 0.0
        delay = min(self.backoff_seconds * 2.0 ** (failures - 1), self.backoff_seconds * MAX_BACKOFF_FACTOR)
        return max(0.0, float(delay) - (now() - last).total_seconds())

    def _forget(self, uid: str) -> None:
        self._backoff.pop(uid, None)
        self._api_failures.pop(uid, None)
        for key in [k for k in self._index_failures if k[0] == uid]:
            del self._index_failures[key]

    def _schedule_ttl(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None or job["metadata"].get("deletionTimestamp"):
            return
        finished = condition(job, "Complete") or condition(job, "Failed")
        ended = parse_time((finished or {}).get("lastTransitionTime"))
        if ended is not None:
            self._later(job, "ttl", ttl - (now() - ended).total_seconds())

    def _expire(self, namespace: str, name: str) -> None:
        """The TTL-after-finished controller: a foreground deletion, with the uid as precondition."""
        job = self.state.store.find("jobs", namespace, name)
        if job is None or not is_finished(job) or job["metadata"].get("deletionTimestamp"):
            return
        options = DeleteOptions(propagation_policy="Foreground", preconditions={"uid": job["metadata"]["uid"]})
        self.state.delete_object("jobs", namespace, name, options)

"""``GPUTrainingJobTrigger``: a deferred training over several Kubernetes machines, carried on in the triggerer.

A multi-machine ``AccelerateTrainOperator(deferrable=True)`` creates its Indexed Job and Service
(``operators.accelerate_kubernetes``) and defers here. The trigger learns the Job's state from a
shared watch of the provider's training Jobs and its pods from the shared watch of the provider's
pods (``pod_watch``: one LIST and one WATCH per cluster, namespace and kind in a triggerer, however
many trainings wait; no GET per pod or per poll). The Job's conditions are the Job controller's
verdict, which pods alone do not always show (``spot.training_job``); the pods say why it ended,
classified by the same code as a training the worker watches.

The trigger owns the spot run, as ``GPUPodTrigger`` does for one pod: when a rank is reclaimed,
evicted or gets no capacity in time and the policy resubmits, it records the interruption, writes
the ended machines' logs into the task's log, creates the next Service (its state annotation
records the decision), deletes the old Job and Service in the foreground, waits until they are
gone, and creates the next Job (``job_replacement``), the Service's owner, adopting a Job or
Service of that name on 409 when its labels name the same task try (one being deleted is waited
out and made anew: ``adoption``). The task resumes on a worker once, for the Job that
ends the run (its result, profile, spot record and cleanup), with the run's state in the event.

A trigger that runs again (a triggerer restart) or twice (apache/airflow#37180) starts from its
first arguments: it finds the latest Job or Service of this task try and takes the run's state
from its annotation, so that it goes on where it was, records each interruption once and creates
no second Job. Mark Failed (``on_kill``, Airflow 3.3+; ``cleanup`` before) deletes the Job and
Service, unless the Job has ended: a task resuming from a twin's event reads it (``training_job_kill``). An
error (say RBAC without ``list jobs``) is an ``error`` event: the worker then watches the Job itself,
and the Service is marked so that a twin's kill leaves both (``handed_back``).

Ranks the API refuses to create (a ResourceQuota, a LimitRange...) show only as the Job's
``FailedCreate`` events: fewer pods than machines for longer than the startup timeout ends the wait
with the latest event's message (``spot.training_job.MissingRanks``), one LIST of the Job's events
then; not a capacity shortage, so the trigger does not replace the Job: the worker deletes it and
fails the task.
"""

from __future__ import annotations

import asyncio
import time
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.spot.training_job import (
    JobEnd,
    JobPods,
    MissingRanks,
    StuckClock,
    failed_create_messages,
    failing,
    job_end,
    judged,
    node_of,
    rank_of,
    refused,
    to_json,
)
from airflow_gpu.triggers import cluster, handed_back
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.triggers.job_replacement import JobReplacement
from airflow_gpu.triggers.kubernetes import LOG_TAIL_LINES, STATE_KEY
from airflow_gpu.triggers.kubernetes_api import JOBS, slim
from airflow_gpu.triggers.pod_replacement import IDENTITY_LABELS
from airflow_gpu.triggers.pod_watch import SharedPodWatch
from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY, read_result_line
from airflow_gpu.triggers.resume_dwell import dwell
from airflow_gpu.triggers.training_job_kill import TrainingJobKill
from airflow_gpu.utils.training_job import DELETE_WAIT_SECONDS, JOB_LABEL, job_name, newest, saved_state

#: The event key of the main machine's pod as the watch last saw it (``slim``): a pod deleted with its node
#: before the task resumes is gone from the worker's list, and its termination message with it.
MAIN_SEEN_KEY = "gpu_main_pod_seen"


class GPUTrainingJobTrigger(TrainingJobKill, BaseTrigger):
    """Waits for a training Job; carries the spot run on through its replacements.

    :param job_name: the Job the worker deferred on.
    :param namespace: its namespace.
    :param plan: what ``replacement_plan`` built on the worker: the policy, the run's state, and the
        Job and Service of every placement the policy may move to.
    :param capacity_timeout: seconds a rank may stay unschedulable before that ends the Job.
    :param startup_timeout: seconds a rank may fail to start (an image that does not pull).
    :param grace_period: the pods' termination grace period, for the wait on a deletion.
    :param deferred_at: when the task deferred (epoch seconds), for ``resume_dwell``.

    The connection fields are ``KubernetesPodTrigger``'s.
    """

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        plan: dict[str, Any],
        kubernetes_conn_id: str | None = None,
        connection_extras: dict[str, Any] | None = None,
        cluster_context: str | None = None,
        config_dict: dict[str, Any] | None = None,
        in_cluster: bool | None = None,
        poll_interval: float = 2.0,
        capacity_timeout: float = 600.0,
        startup_timeout: float = 600.0,
        grace_period: float = 30.0,
        base_container_name: str = "base",
        get_logs: bool = True,
        deferred_at: float | None = None,
    ) -> None:
        super().__init__()
        self.job_name, self.namespace, self.plan = job_name, namespace, plan
        self.kubernetes_conn_id, self.connection_extras = kubernetes_conn_id, connection_extras
        self.cluster_context, self.config_dict, self.in_cluster = cluster_context, config_dict, in_cluster
        self.poll_interval, self.capacity_timeout, self.startup_timeout = (
            poll_interval,
            capacity_timeout,
            startup_timeout,
        )
        self.grace_period, self.base_container_name, self.get_logs = grace_period, base_container_name, get_logs
        self.deferred_at = deferred_at
        self.current = job_name  # the Job waited on now
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "namespace": self.namespace, "plan": self.plan,
            "kubernetes_conn_id": self.kubernetes_conn_id, "connection_extras": self.connection_extras,
            "cluster_context": self.cluster_context, "config_dict": self.config_dict, "in_cluster": self.in_cluster,
            "poll_interval": self.poll_interval, "capacity_timeout": self.capacity_timeout,
            "startup_timeout": self.startup_timeout, "grace_period": self.grace_period,
            "base_container_name": self.base_container_name, "get_logs": self.get_logs,
            "deferred_at": self.deferred_at,
        }  # fmt: skip

    @cached_property
    def connection(self) -> cluster.ClusterConnection:
        return cluster.ClusterConnection(
            self.kubernetes_conn_id, self.connection_extras, self.cluster_context, self.config_dict, self.in_cluster
        )

    @property
    def jobs(self) -> SharedPodWatch:
        return SharedPodWatch.get(self.connection, self.namespace, float(self.poll_interval), kind=JOBS)

    @property
    def pods(self) -> SharedPodWatch:
        return SharedPodWatch.get(self.connection, self.namespace, float(self.poll_interval))

    @property
    def identity(self) -> dict[str, str]:
        """The task try's labels (dag, task, run, map index, try) that every Job of the run carries."""
        labels = self.plan["base"]["job"]["metadata"].get("labels") or {}
        return {k: labels[k] for k in IDENTITY_LABELS if k in labels}

    # --- the run ------------------------------------------------------------------------------

    async def run(self) -> Any:
        replacement = JobReplacement.from_argument(self.plan, self.base_container_name, "delete_pod")
        try:
            payload = await self._carry_on(replacement)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the worker watches the Job itself from here
            self.log.warning("Watching training Job %s failed: %s: %s", self.current, type(error).__name__, error)
            payload = {
                "status": "error", "job": self.current, "namespace": self.namespace,
                "message": f"{type(error).__name__}: {error}", STATE_KEY: replacement.run.to_json(),
            }  # fmt: skip
        await dwell(self.deferred_at)
        if payload["status"] == "error":  # the worker watches the Job on: a twin's kill must not stop it
            await handed_back.mark(self, self.connection, "services", self.namespace, self.current)
        self._fired = True
        yield TriggerEvent(payload)

    async def _carry_on(self, replacement: JobReplacement) -> dict[str, Any]:
        """Each Job's wait, the next Job after an interruption the policy rides out; the last Job's event."""
        job = await self._resume_point(replacement)
        while True:
            self.current = job
            end = await self._wait(job)
            snapshot = replacement.run.to_json()  # what the worker decides from, if this Job is the last
            if end.result.outcome is not Outcome.SUCCEEDED and replacement.replaceable(end.result):
                decision = replacement.decide(job, end.result, node_of(end.culprit))
                if decision.action == "resubmit":
                    await self._write_logs(job, end.pods)
                    log_interruptions(self.log, replacement.run, decision, job, noun="training Job")
                    job = await self._replace(job, replacement)
                    continue
                replacement.run.restore(snapshot)  # the worker records it and fails, as for any last Job
            main = end.pods.main()
            payload = {
                "status": "success" if end.result.outcome is Outcome.SUCCEEDED else "failed",
                "job": job, "namespace": self.namespace, STATE_KEY: snapshot, "result": to_json(end.result),
                "culprit": end.culprit, "main_pod": main["metadata"]["name"] if main else None,
                "message": f"{end.result.reason}: {end.result.message}".rstrip(": "),
                MAIN_SEEN_KEY: main,  # as the watch last saw it: gone with its node, its status holds the result
            }  # fmt: skip
            if payload["status"] == "success" and main is not None:  # its log may go with its node before the resume
                name = main["metadata"]["name"]
                if line := await read_result_line(self.connection, self.namespace, name, self.base_container_name,
                                                  self.log):  # fmt: skip
                    payload[RESULT_LINE_KEY] = line
            return payload

    async def _resume_point(self, replacement: JobReplacement) -> str:
        """The Job to wait on: the first one, or, when this trigger ran before (a restart, a twin), the
        latest it created, with the run's state as recorded on it."""
        found = await self._objects()
        latest = newest(found)
        state = saved_state(latest) if latest is not None else None
        if latest is None or state is None or int(state.get("submissions") or 0) <= replacement.run.submissions:
            replacement.run.submitted(self.job_name)
            return self.job_name
        if ignored := replacement.run.restore(state):
            raise ValueError(f"the spot state on {latest['metadata']['name']} is not usable: {ignored}")
        name = job_name(replacement.first_name, replacement.run.submissions)
        self.log.info("Going on with training Job %s (submission %d)", name, replacement.run.submissions + 1)
        if not any(o["kind"] == "Job" and o["metadata"]["name"] == name for o in found):  # stopped before creating it
            for earlier in {o["metadata"]["name"] for o in found} - {name}:
                await self._remove(earlier)
            manifests = replacement.manifest(name)
            await cluster.create_or_adopt(self.connection, "jobs", self.namespace, manifests["job"], self.log)
            await cluster.own_service(self.connection, self.namespace, manifests["service"], self.log)
        replacement.run.submitted(name)
        return name

    async def _objects(self) -> list[dict[str, Any]]:
        """This task try's training Jobs and Services (one LIST each)."""
        selector = ",".join([*(f"{k}={v}" for k, v in self.identity.items()), JOB_LABEL])
        found = []
        for kind, plural in (("Job", "jobs"), ("Service", "services")):
            found += [{**o, "kind": kind} for o in await cluster.list_objects(self.connection, plural, self.namespace,
                                                                            selector)]  # fmt: skip
        return found

    async def _replace(self, job: str, replacement: JobReplacement) -> str:
        """The next Service (recording the decision), the old Job and Service gone, then the next Job, which
        becomes the Service's owner (the garbage collector removes both together, as the worker's)."""
        name = replacement.next_name()
        manifests = replacement.manifest(name)
        await cluster.create_or_adopt(self.connection, "services", self.namespace, manifests["service"], self.log)
        await self._remove(job)
        adopted = await cluster.create_or_adopt(self.connection, "jobs", self.namespace, manifests["job"], self.log)
        await cluster.own_service(self.connection, self.namespace, manifests["service"], self.log)
        replacement.run.submitted(name)
        self.log.info(
            "%s training Job %s on %s (%s capacity) in place of %s", "Adopted" if adopted else "Created", name,
            replacement.run.accelerator, replacement.run.capacity, job,
        )  # fmt: skip
        return name

    async def _remove(self, job: str) -> None:
        """Delete the Job (foreground: it goes once its pods are gone) and its Service; wait for the Job to go,
        so that the next Job's machines never run beside this one's."""
        await cluster.delete(self.connection, "jobs", self.namespace, job, propagation_policy="Foreground")
        await cluster.delete(self.connection, "services", self.namespace, job)
        watch, seen = self.jobs, 0
        deadline = time.monotonic() + DELETE_WAIT_SECONDS + self.grace_period
        while (left := deadline - time.monotonic()) > 0:
            try:
                state = await asyncio.wait_for(watch.next_state(job, seen), left)
            except asyncio.TimeoutError:
                break
            if state.deleted:
                watch.forget(job)
                return
            seen = state.version
        watch.forget(job)
        self.log.warning("Training Job %s was not gone %.0f s after its deletion; going on", job, DELETE_WAIT_SECONDS)

    # --- one Job's wait -----------------------------------------------------------------------

    async def _wait(self, job: str) -> JobEnd:
        """Until the Job ended (or a rank stayed unschedulable or unstarted past its timeout)."""
        jobs, pods = self.jobs, self.pods
        seen_pods = JobPods()
        clock = StuckClock({Outcome.UNSCHEDULABLE: self.capacity_timeout, Outcome.INFRASTRUCTURE: self.startup_timeout})
        missing = MissingRanks(float(self.startup_timeout))
        jobs.hold(job)
        pods.hold_group(JOB_LABEL, job)
        job_task: asyncio.Task[Any] | None = None
        pods_task: asyncio.Task[Any] | None = None
        job_version = pods_version = 0
        current: Any = None  # the Job's last state (a PodState), once known
        listed_at: float | None = None  # since the Job was judged, its pods are listed as the worker does
        try:
            while True:
                job_task = job_task or asyncio.create_task(jobs.next_state(job, job_version))
                pods_task = pods_task or asyncio.create_task(pods.next_group(JOB_LABEL, job, pods_version))
                done, _ = await asyncio.wait(
                    {job_task, pods_task}, timeout=float(self.poll_interval), return_when=asyncio.FIRST_COMPLETED
                )
                if job_task in done:
                    current, job_task = job_task.result(), None
                    job_version = current.version
                if pods_task in done:
                    (pods_version, members), pods_task = pods_task.result(), None
                    for name, state in members.items() if listed_at is None else ():
                        seen_pods.record(name, state.pod, state.deleted)
                if current is None:
                    continue
                obj = None if current.deleted else current.pod
                # The pods' stream may lag the Job's: once the controller judged the Job, its pods are read
                # after it (one LIST per poll at most), as the worker reads them, so that the failed rank is seen.
                if judged(obj) and (listed_at is None or time.monotonic() - listed_at >= float(self.poll_interval)):
                    listed_at = time.monotonic()
                    found = await cluster.list_objects(self.connection, "pods", self.namespace, f"{JOB_LABEL}={job}")
                    seen_pods.listed({p["metadata"]["name"]: slim(p) for p in found})
                stays = await self._node_fates(seen_pods) if failing(obj) else {}
                ended = job_end(obj, seen_pods, stays.get, job)
                if ended is None:
                    ended = clock.check(seen_pods.current(), time.monotonic())
                expected = int(self.plan["base"]["job"]["spec"].get("parallelism") or 0)  # the watch keeps Jobs slim
                if ended is None and (count := missing.check(obj, seen_pods.current(), time.monotonic(), expected)):
                    events = await self._failed_creates(job)
                    ended = refused(job, count, expected, float(self.startup_timeout), events, self.namespace), None
                if ended is not None:
                    return JobEnd(ended[0], ended[1], seen_pods)
        finally:
            for task in (job_task, pods_task):
                if task is not None:
                    task.cancel()
            jobs.release(job)
            pods.release_group(JOB_LABEL, job)
            jobs.forget(job)

    async def _failed_creates(self, job: str) -> list[str]:
        """The messages of the Job's ``FailedCreate`` events, oldest first; empty when they cannot be read."""
        fields = f"involvedObject.kind=Job,involvedObject.name={job}"
        try:
            events = await cluster.list_objects(self.connection, "events", self.namespace, "", fields)
            return failed_create_messages(events)
        except Exception as error:  # the refusal stands without its wording
            self.log.warning("The events of training Job %s could not be read (%s)", job, error)
            return []

    async def _node_fates(self, pods: JobPods) -> dict[str | None, bool | None]:
        nodes = sorted(pods.nodes_to_check())
        fates = await asyncio.gather(*(cluster.node_stays(self.connection, node) for node in nodes))
        return dict(zip(nodes, fates, strict=True))

    async def _write_logs(self, job: str, pods: JobPods) -> None:
        """The ended Job's machines' output into the task's log: an interrupted attempt's output (its last
        checkpoint) is not lost with the Job. A rank the Job controller deleted took its log with it."""
        if not self.get_logs:
            return
        for pod in sorted(pods.current(), key=lambda p: int(rank_of(p) or 0)):
            name = pod["metadata"]["name"]
            try:
                text = await cluster.pod_log_tail(
                    self.connection, self.namespace, name, self.base_container_name, LOG_TAIL_LINES
                )
            except Exception as error:  # the run goes on without it
                self.log.info("The log of %s (Job %s) could not be read (%s)", name, job, error)
                continue
            for line in text.splitlines():
                if line.strip() and not line.startswith("::airflow-gpu-"):  # result, profile: the last Job's
                    self.log.info("[machine %s] %s", rank_of(pod), line)

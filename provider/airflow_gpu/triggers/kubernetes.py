"""``GPUPodTrigger``: ``KubernetesPodTrigger`` that learns its pod's states from one shared watch.

A deferred ``GPUKubernetesOperator`` waits here instead of on the official trigger, which reads
its pod with a GET every ``poll_interval`` while it runs (and every ``startup_check_interval``
while it starts), building a client each time: 1,000 deferred pods are about 500 requests a
second. This trigger registers its pod with the triggerer's ``SharedPodWatch`` for the cluster and
namespace, so 1,000 pods are one LIST and one long WATCH, and it wakes on the pod's change itself
rather than on the next poll.

Everything else is the official trigger's, inherited: its events (``success``, ``failed``,
``timeout``, ``error``) and their fields, so ``trigger_reentry`` reads them unchanged; the
execution deadline; the schedule and startup timeouts with the same messages; the periodic log
fetch of ``logging_interval``; ``on_kill`` deleting the pod on Mark Failed (Airflow 3.3+) and the
older ``cleanup`` path (with a spot run, both delete every pod of the task try), except a pod whose
workload has ended, which a task resuming from a twin's event reads (``kill_spare``). Every event but
``success`` carries the pod's last state the watch saw (``gpu_last_seen``): a pod deleted by the time
the task resumes is still classified from it, so a reclaim is told from a person's delete;
``success`` carries the pod's result line instead (``gpu_result_line``, ``result_tail``).

With ``gpu_spot`` the trigger also carries the spot run on after an interrupted pod: that step (the
next pod's create, the ended pod's log and delete, where a restarted trigger stands) is
``pod_carry_on.PodCarryOn``'s, a mixin kept apart so that this module stays the wait for one pod.
"""

from __future__ import annotations

import asyncio
import time
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import PodLaunchFailedException
from airflow.providers.cncf.kubernetes.triggers.pod import ContainerState, KubernetesPodTrigger
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    OnKillAction,
    PodLaunchTimeoutException,
    detect_pod_terminate_early_issues,
)
from airflow.providers.cncf.kubernetes.version_compat import AIRFLOW_V_3_3_PLUS
from airflow.triggers.base import TriggerEvent

from airflow_gpu.spot.start_failure import missing_program
from airflow_gpu.triggers import cluster, handed_back, kill_guard, kill_spare, kill_tasks, result_tail
from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.kubernetes_api import PodState
from airflow_gpu.triggers.pod_carry_on import LAST_SEEN_KEY as LAST_SEEN_KEY
from airflow_gpu.triggers.pod_carry_on import LOG_TAIL_LINES as LOG_TAIL_LINES
from airflow_gpu.triggers.pod_carry_on import NEXT_KEY as NEXT_KEY
from airflow_gpu.triggers.pod_carry_on import STATE_KEY as STATE_KEY
from airflow_gpu.triggers.pod_carry_on import PodCarryOn
from airflow_gpu.triggers.pod_replacement import PodReplacement, task_try_selector
from airflow_gpu.triggers.pod_watch import SharedPodWatch
from airflow_gpu.triggers.resume_dwell import dwell


class PodGone(Exception):
    """The pod was deleted while the trigger waited for it (where the official trigger gets a 404)."""


class GPUPodTrigger(PodCarryOn, KubernetesPodTrigger):
    """The official pod trigger, fed by a shared list+watch instead of a GET per pod per poll; with
    ``gpu_spot``, the replacement step of ``PodCarryOn`` after each interrupted pod."""

    def __init__(self, *args: Any, gpu_spot: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The spot run to carry on here (``pod_replacement``); None: every end goes to the worker.
        self.gpu_spot = gpu_spot

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        if self.gpu_spot is not None:
            kwargs["gpu_spot"] = self.gpu_spot
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @classmethod
    def from_official(cls, trigger: KubernetesPodTrigger, gpu_spot: dict[str, Any] | None = None) -> GPUPodTrigger:
        """The same wait, from the trigger ``KubernetesPodOperator.invoke_defer_method`` built."""
        _, kwargs = trigger.serialize()
        return cls(**kwargs, gpu_spot=gpu_spot)

    _gone: PodState | None = None  # the pod's last state, once the watch said it was deleted
    _handed_back = False  # the event for the worker was yielded
    _creating: str | None = None  # the pod being created in place of an ended one
    _last_seen: dict[str, Any] | None = None  # the pod as the watch last showed it

    @cached_property
    def connection(self) -> ClusterConnection:
        return ClusterConnection(
            kubernetes_conn_id=self.kubernetes_conn_id,
            connection_extras=self.connection_extras,
            cluster_context=self.cluster_context,
            config_dict=self.config_dict,
            in_cluster=self.in_cluster,
        )

    @cached_property
    def hook(self) -> Any:
        """The official trigger's hook (``on_kill``, ``cleanup``, ``logging_interval``), reading the
        cluster as the worker did: see ``ClusterConnection.hook``."""
        return self.connection.hook()

    async def on_kill(self) -> None:
        """The official ``on_kill`` (delete the pod on Mark Failed), unless the trigger only moved to
        another triggerer, which follows the pod (``kill_guard``).

        With a spot run here the trigger may be between two pods (its event fired, the next pod being
        created): every pod of this task try that has not ended goes, found by its labels, and the one
        being created.
        """
        # Owned and bounded (``kill_tasks``): the trigger runner cancels a removed trigger again at every
        # turn of its loop until its task ends, and ``run_trigger`` swallows the cancel that reaches
        # ``on_kill``: the kill runs on as a task of its own, its deletes retried within the budget.
        await kill_tasks.run(f"Deleting the pods of trigger for {self._pod_ref(self.pod_name)}", self.log, self._kill)

    async def _kill(self, kill: kill_tasks.Kill) -> None:
        if self._handed_back or (self.gpu_spot is None and self._fired_event):
            return
        if await kill_guard.handed_over(self):
            return
        if self.on_kill_action == OnKillAction.KEEP_POD:
            return
        if self.gpu_spot is None:  # the official on_kill's delete, with the kill's bounded retries
            await self._delete_pod(self.pod_name, kill)
            return
        await self._delete_this_try(kill)

    async def cleanup(self) -> None:
        """The official ``cleanup``: before Airflow 3.3 Mark Failed reaches a trigger only here (after
        ``safe_to_cancel``: not on a triggerer restart). With a spot run here it deletes every pod of the
        task try, as ``on_kill`` does: the official one deletes only the pod waited on, and would leave
        a replacement in flight running, billed, with nothing to follow it."""
        if AIRFLOW_V_3_3_PLUS:
            await super().cleanup()
            return
        if self._handed_back or self.on_kill_action == OnKillAction.KEEP_POD:
            return
        if self.gpu_spot is None and self._fired_event:
            return
        # Airflow 3.2's trigger runner cancels a trigger that left the database again at every turn of
        # its loop until the trigger's task ends (``cancel_triggers``): any await here would be cut
        # short, and Mark Failed left the pod running. The work is an owned, bounded task (``kill_tasks``).
        await kill_tasks.run(f"Cleaning up after {self._pod_ref(self.pod_name)}", self.log, self._after_cancel)

    async def _after_cancel(self, kill: kill_tasks.Kill) -> None:
        """Before Airflow 3.3: delete what this try runs if a person killed the task (it is no longer
        deferred), keep it if the triggerer is only stopping or handing over (still deferred)."""
        deferred = await kill_guard.still_deferred(self)  # in the loop: see kill_guard.still_deferred
        if deferred is None:
            self.log.warning("Could not tell the task's state; no pod is deleted, to be safe")
        elif deferred:
            self.log.info("The task is still deferred (a triggerer restart or hand-over): its pod stays")
        elif self.gpu_spot is None:
            await self._delete_pod(self.pod_name, kill)
        else:
            await self._delete_this_try(kill)

    async def _delete_this_try(self, kill: kill_tasks.Kill) -> None:
        """Every pod of this task try that has not ended, found by its labels, and the one being created."""
        names = {self.pod_name, *([self._creating] if self._creating else [])}
        kill.aim(*(self._pod_ref(name) for name in [self.pod_name, *sorted(names - {self.pod_name})]))
        selector, found = task_try_selector((self.gpu_spot or {}).get("base") or {}), []
        try:  # no identity labels (a pod built without a context): only the pods named here
            if selector:
                found = await cluster.list_objects(self.connection, "pods", self.pod_namespace, selector)
            running = [p for p in found if not kill_spare.pod_ended(p, self.base_container_name)]
            names |= {p["metadata"]["name"] for p in running if not p["metadata"].get("deletionTimestamp")}
        except Exception as error:  # the current pod goes in any case
            self.log.warning("Could not list this task try's pods (%s: %s)", type(error).__name__, error)
        listed = {p["metadata"]["name"]: p for p in found}
        # All at once, the pod waited on first: each delete may be throttled and retried (429 with
        # Retry-After), and one at a time they could outlast ``[triggerer] on_kill_timeout`` before the
        # running pod, the billed one, is reached.
        ordered = [self.pod_name, *sorted(names - {self.pod_name})]
        await asyncio.gather(*(self._delete_pod(name, kill, listed.get(name)) for name in ordered))
        await kill_spare.let_go(self, [p for n, p in listed.items() if n not in names])  # ended or deleting

    async def _delete_pod(self, name: str, kill: kill_tasks.Kill, seen: dict[str, Any] | None = None) -> None:
        """Delete the pod (``seen``: as just listed) unless it has ended or was handed back (``kill_spare``)."""
        kill.aim(self._pod_ref(name))
        if seen is None and (seen := await kill_spare.read(self, "pods", self.pod_namespace, name)) is None:
            kill.stopped(self._pod_ref(name))  # gone already
            return
        ended = bool(seen) and kill_spare.pod_ended(seen, self.base_container_name)
        if kill_spare.spared(self, kill, f"Pod {self.pod_namespace}/{name}", (self._pod_ref(name),), seen, ended):
            await kill_spare.let_go(self, [seen] if ended else [])
            return
        self.log.info("Deleting pod %s in namespace %s.", name, self.pod_namespace)
        try:
            await cluster.delete(self.watch.connection, "pods", self.pod_namespace, name,
                                 grace_period_seconds=self.termination_grace_period)  # fmt: skip
        except Exception:
            self.log.exception("Could not delete pod %s", name)
            return
        kill.stopped(self._pod_ref(name))

    def _pod_ref(self, name: str) -> str:
        return f"pod {self.pod_namespace}/{name}"

    @cached_property
    def watch(self) -> SharedPodWatch:
        return SharedPodWatch.get(self.connection, self.pod_namespace, poll_interval=float(self.poll_interval))

    # --- the pod, from the watch ----------------------------------------------------------

    async def _next(self, seen: int, timeout: float | None = None) -> PodState | None:
        """The pod's next state after ``seen``; None when ``timeout`` passed first."""
        try:
            state = await asyncio.wait_for(self.watch.next_state(self.pod_name, seen), timeout)
        except asyncio.TimeoutError:
            return None
        if state.pod is not None:
            self._last_seen = state.pod
        return state

    async def _get_pod(self) -> Any:  # type: ignore[override]  # the official one is tenacity-wrapped
        """The pod as last seen by the watch (the official trigger GETs it)."""
        state = await self.watch.next_state(self.pod_name, 0)
        if state.deleted or state.pod is None:
            self._gone = state
            raise PodGone(f"pod {self.pod_namespace}/{self.pod_name} was deleted")
        return _model(state.pod)

    # --- the official trigger's waits, without polling ------------------------------------

    async def _wait_for_pod_start(self) -> ContainerState:
        """Until the pod leaves ``Pending``, with ``await_pod_start``'s timeouts and early failures."""
        self.log.info("Waiting up to %ss to get the pod scheduled (shared watch)", self.schedule_timeout)
        started = time.monotonic()
        scheduled_at: float | None = None
        seen = 0
        while True:
            state = await self._next(seen, timeout=self.startup_check_interval)
            if state is not None:
                seen = state.version
                if state.pod is None or (state.deleted and _phase(state.pod) not in ("Succeeded", "Failed")):
                    self._gone = state
                    return ContainerState.FAILED  # ``run`` fires the deletion's event
                pod = _model(state.pod)  # a deleted pod seen ended first: how it ended
                status = pod.status
                if status is not None and status.phase == "Failed" and status.container_statuses is None:
                    raise PodLaunchFailedException("Pod failed before containers started")
                if status is not None and status.phase not in ("Pending", "Unknown"):
                    self.log.info("Pod has reached %s phase", status.phase)
                    return self.define_pod_container_state(pod)
                conditions = (status.conditions if status is not None else None) or []
                if scheduled_at is None and any(c.type == "PodScheduled" and c.status == "True" for c in conditions):
                    scheduled_at = time.monotonic()
                    self.log.info("Waiting %ss to get the pod running...", self.startup_timeout)
                error_message = detect_pod_terminate_early_issues(pod)
                if error_message:
                    raise PodLaunchFailedException(error_message)
                if program := missing_program(state.pod, self.base_container_name):  # CRI-O: Pending for ever
                    raise PodLaunchFailedException(f"the container cannot start: its image has no {program}")
            now = time.monotonic()
            if scheduled_at is not None and now - scheduled_at >= self.startup_timeout:
                raise PodLaunchTimeoutException(
                    f"Pod took too long to start. More than {self.startup_timeout}s. "
                    "Check the pod events in kubernetes."
                )
            if scheduled_at is None and now - started >= self.schedule_timeout:
                raise PodLaunchTimeoutException(
                    "Pod took too long to be scheduled on the cluster, giving up. "
                    f"More than {self.schedule_timeout}s. Check the pod events in kubernetes."
                )

    async def _wait_for_container_completion(self) -> TriggerEvent:
        """Until the base container ends, woken by the pod's changes (``logging_interval``: the official loop)."""
        if self.logging_interval is not None:
            return await super()._wait_for_container_completion()
        deadline = self.trigger_kwargs.get("_execution_deadline")
        seen = 0
        while True:
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining <= 0:
                return TriggerEvent(
                    {
                        "status": "timeout",
                        "namespace": self.pod_namespace,
                        "name": self.pod_name,
                        "message": f"Pod {self.pod_namespace}/{self.pod_name} reached the task's "
                        "execution_timeout deadline.",
                        "last_log_time": self.last_log_time,
                        **self.trigger_kwargs,
                    }
                )
            state = await self._next(seen, timeout=remaining)
            if state is None:
                continue
            seen = state.version
            pod = _model(state.pod, COMPLETION_STATUS) if state.pod else None
            container_state = self.define_pod_container_state(pod) if pod is not None else None
            ended = container_state in (ContainerState.TERMINATED, ContainerState.FAILED)
            if state.pod is None or (state.deleted and not ended):  # gone before it ended
                self._gone = state
                return self._gone_event(state)
            if container_state in (ContainerState.TERMINATED, ContainerState.FAILED):
                succeeded = container_state == ContainerState.TERMINATED
                event: dict[str, Any] = {
                    "status": "success" if succeeded else "failed",
                    "namespace": self.pod_namespace,
                    "name": self.pod_name,
                    "last_log_time": self.last_log_time,
                    **self.trigger_kwargs,
                }
                if not succeeded:
                    event["message"] = "Container state failed"
                return TriggerEvent(event)

    async def run(self) -> Any:
        """Each pod's wait, and with ``gpu_spot`` the next pod created here after an interruption.

        The event that reaches the worker is the one of the pod that ends the run: it succeeded,
        failed by itself, or the policy gives up; ``gpu_state`` carries the run's state to it.
        """
        await self.connection.prefetch()  # before the official trigger's hook reads it, from a thread on 3.2
        replacement = (
            PodReplacement.from_argument(self.gpu_spot, self.base_container_name, self.on_finish_action)
            if self.gpu_spot is not None
            else None
        )
        if replacement is not None:
            await self._resume_point(replacement)
        while True:
            payload: dict[str, Any] | None = None
            try:
                async for event in self._one_pod():
                    payload = dict(event.payload)
            finally:
                self.watch.forget(self.pod_name)  # an ended pod is dropped from the shared watch
            if payload is None:
                return
            final = payload if replacement is None else await self._carry_on(replacement, payload)
            if final is not None:
                final = await result_tail.with_result_line(self, final)  # before the pod can be deleted
                await dwell(self._deferred_at())
                if final.get("status") in ("error", "timeout") and self._gone is None:  # the task follows it on
                    name = str(final.get("name") or self.pod_name)
                    await handed_back.mark(self, self.connection, "pods", self.pod_namespace, name)
                self._handed_back = True
                yield TriggerEvent(final)
                return

    def _deferred_at(self) -> float | None:
        start = self.trigger_start_time
        return start.timestamp() if start is not None else None

    async def _one_pod(self) -> Any:
        """The official run for the current pod; every event but ``success`` carries its last state."""
        async for event in super().run():
            if self._gone is not None:
                yield self._gone_event(self._gone)
            elif event.payload.get("status") != "success" and self._last_seen is not None:
                # The pod may be gone by the time the task resumes: its last state goes with the event.
                yield TriggerEvent({**event.payload, LAST_SEEN_KEY: self._last_seen})
            else:
                yield event

    def _gone_event(self, state: PodState) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": "failed",
                "namespace": self.pod_namespace,
                "name": self.pod_name,
                "message": f"Pod {self.pod_namespace}/{self.pod_name} was deleted while the task was deferred",
                "last_log_time": self.last_log_time,
                LAST_SEEN_KEY: state.pod,
                **self.trigger_kwargs,
            }
        )


def _phase(pod: dict[str, Any]) -> Any:
    return (pod.get("status") or {}).get("phase")


#: What ``define_pod_container_state`` reads of a pod's status: the phase, then the base container's state.
COMPLETION_STATUS = ("phase", "containerStatuses")


def _model(pod: dict[str, Any], status_fields: tuple[str, ...] | None = None) -> Any:
    """The pod's status as the ``V1Pod`` the official trigger's helpers read (``pod.status...``).

    The watch keeps a slim pod (no spec: see ``pod_watch.slim``), so only the name and status are
    turned into models; with ``status_fields``, only those of the status. The wait for the end builds
    one per change of each pod, 500 a second when a fan-out ends, and the client's deserialiser is
    most of the triggerer's CPU then: the conditions, addresses and times it does not read cost as
    much as the container states it does (``COMPLETION_STATUS``).
    """
    from kubernetes.client import V1ObjectMeta, V1Pod, V1PodStatus

    from airflow_gpu.utils.kubernetes import configuration, to_model

    metadata, status, shared = pod.get("metadata") or {}, pod.get("status") or {}, configuration()
    return V1Pod(
        metadata=V1ObjectMeta(
            name=metadata.get("name"), namespace=metadata.get("namespace"), local_vars_configuration=shared
        ),
        status=to_model({k: v for k, v in status.items() if status_fields is None or k in status_fields}, V1PodStatus),
        local_vars_configuration=shared,
    )

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
older ``cleanup`` path. Every event but ``success`` carries the pod's last state the watch saw
(``gpu_last_seen``): a pod deleted by the time the task resumes is still classified from it, so a
reclaim is told from a person's delete.
"""

from __future__ import annotations

import asyncio
import time
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import PodLaunchFailedException
from airflow.providers.cncf.kubernetes.triggers.pod import ContainerState, KubernetesPodTrigger
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    PodLaunchTimeoutException,
    detect_pod_terminate_early_issues,
)
from airflow.triggers.base import TriggerEvent

from airflow_gpu.triggers.pod_watch import ClusterConnection, PodState, SharedPodWatch

#: Event key carrying the pod as last seen, when it was deleted while the trigger waited.
LAST_SEEN_KEY = "gpu_last_seen"


class PodGone(Exception):
    """The pod was deleted while the trigger waited for it (where the official trigger gets a 404)."""


class GPUPodTrigger(KubernetesPodTrigger):
    """The official pod trigger, fed by a shared list+watch instead of a GET per pod per poll."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @classmethod
    def from_official(cls, trigger: KubernetesPodTrigger) -> GPUPodTrigger:
        """The same wait, from the trigger ``KubernetesPodOperator.invoke_defer_method`` built."""
        _, kwargs = trigger.serialize()
        return cls(**kwargs)

    _gone: PodState | None = None  # the pod's last state, once the watch said it was deleted
    _last_seen: dict[str, Any] | None = None  # the pod as the watch last showed it

    @cached_property
    def watch(self) -> SharedPodWatch:
        connection = ClusterConnection(
            kubernetes_conn_id=self.kubernetes_conn_id,
            connection_extras=self.connection_extras,
            cluster_context=self.cluster_context,
            config_dict=self.config_dict,
            in_cluster=self.in_cluster,
        )
        return SharedPodWatch.get(connection, self.pod_namespace, poll_interval=float(self.poll_interval))

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
                if state.deleted or state.pod is None:
                    self._gone = state
                    return ContainerState.FAILED  # ``run`` fires the deletion's event
                pod = _model(state.pod)
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
            if state.deleted or state.pod is None:
                self._gone = state
                return self._gone_event(state)
            container_state = self.define_pod_container_state(_model(state.pod))
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
        """The official run; every event but ``success`` carries the pod's last state (``gpu_last_seen``)."""
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


def _model(pod: dict[str, Any]) -> Any:
    """The API's JSON as the ``V1Pod`` the official trigger's helpers read (attribute names alike)."""
    from kubernetes.client import V1Pod

    from airflow_gpu.utils.kubernetes import to_model

    return to_model(pod, V1Pod)

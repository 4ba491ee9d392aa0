"""What ended a run: preemption, eviction, no capacity, infrastructure, or the application itself.

The operators retry on a preemption and must not on a bug, so the difference has to be read off
the status the platform reports. Input is the Kubernetes API's pod as a dict (``V1Pod`` sanitised
with ``ApiClient().sanitize_for_serialization``); the rules are a table below, each with the
status shape it recognises (DESIGN.md: Kubernetes facts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    SUCCEEDED = "succeeded"
    PREEMPTED = "preempted"  # the capacity was taken back: spot reclaim, node shutdown, node gone
    EVICTED = "evicted"  # moved off its node: drain, node pressure
    UNSCHEDULABLE = "unschedulable"  # no node offers what it asks for (yet)
    INFRASTRUCTURE = "infrastructure"  # the platform could not run it: image pull, bad config
    APPLICATION = "application"  # the workload failed: non-zero exit, OOMKilled
    RUNNING = "running"  # not finished


@dataclass(frozen=True)
class Classification:
    outcome: Outcome
    reason: str
    message: str = ""
    exit_code: int | None = None
    #: Whether running the same thing again may succeed (a node that vanished: yes; a bad image: no).
    transient: bool = False

    @property
    def interrupted(self) -> bool:
        """The platform, not the workload, ended the run; resubmitting is the right response."""
        return self.outcome in (Outcome.PREEMPTED, Outcome.EVICTED) or (
            self.outcome is Outcome.INFRASTRUCTURE and self.transient
        )


#: ``DisruptionTarget`` condition reasons (Kubernetes >= 1.26) and what they mean here.
DISRUPTION_REASONS: dict[str, Outcome] = {
    "TerminationByKubelet": Outcome.PREEMPTED,  # graceful node shutdown (spot reclaim)
    "PreemptionByScheduler": Outcome.PREEMPTED,  # a higher-priority pod took the node
    "DeletionByTaintManager": Outcome.PREEMPTED,  # NoExecute taint, e.g. node not ready
    "DeletionByPodGC": Outcome.PREEMPTED,  # the node is gone
    "EvictionByEvictionAPI": Outcome.EVICTED,  # kubectl drain, cluster autoscaler scale-down
}
#: ``status.reason`` of a pod that the node, not the workload, ended.
POD_REASONS: dict[str, tuple[Outcome, bool]] = {
    "Terminated": (Outcome.PREEMPTED, True),  # "Pod was terminated in response to imminent node shutdown."
    "Shutdown": (Outcome.PREEMPTED, True),  # the same, before Kubernetes 1.26
    "NodeShutdown": (Outcome.PREEMPTED, True),
    "NodeLost": (Outcome.PREEMPTED, True),
    "Evicted": (Outcome.EVICTED, True),  # node-pressure eviction
    "UnexpectedAdmissionError": (Outcome.INFRASTRUCTURE, True),  # e.g. the device plugin lost a GPU
    "OutOfnvidia.com/gpu": (Outcome.INFRASTRUCTURE, True),
}
#: Container ``waiting``/``terminated`` reasons that mean the platform could not start the workload.
INFRASTRUCTURE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ContainerCannotRun",
        "StartError",
        "RunContainerError",
    }
)


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def _container_states(pod: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(container name, state kind, state) for init and main containers."""
    status = pod.get("status") or {}
    states = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            for kind, state in (container.get("state") or {}).items():
                if state:
                    states.append((container.get("name", ""), kind, state))
    return states


def classify_pod(pod: Mapping[str, Any] | None) -> Classification:
    """Classify a pod as the API returned it; None means the pod no longer exists."""
    if pod is None:
        return Classification(
            Outcome.PREEMPTED,
            "PodDeleted",
            "the pod disappeared before it finished (deleted with its node?)",
            transient=True,
        )
    status = pod.get("status") or {}
    phase = status.get("phase")
    conditions = _conditions(pod)
    if phase == "Succeeded":
        return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
    disruption = conditions.get("DisruptionTarget")
    if disruption and disruption.get("status") == "True":
        reason = disruption.get("reason", "DisruptionTarget")
        outcome = DISRUPTION_REASONS.get(reason, Outcome.PREEMPTED)
        return Classification(outcome, reason, disruption.get("message") or status.get("message") or "", transient=True)
    pod_reason = status.get("reason")
    if pod_reason in POD_REASONS:
        outcome, transient = POD_REASONS[pod_reason]
        return Classification(outcome, pod_reason, status.get("message") or "", transient=transient)
    for name, _kind, state in _container_states(pod):
        reason = state.get("reason", "")
        if reason in INFRASTRUCTURE_REASONS:
            message = state.get("message") or f"container {name}: {reason}"
            return Classification(Outcome.INFRASTRUCTURE, reason, message, state.get("exitCode"))
    if phase == "Failed":
        failed = [(n, s) for n, kind, s in _container_states(pod) if kind == "terminated" and s.get("exitCode")]
        if failed:
            name, state = failed[-1]
            reason = state.get("reason") or "Error"
            code = state.get("exitCode")
            detail = "out of memory (OOMKilled)" if reason == "OOMKilled" else f"exit code {code}"
            return Classification(Outcome.APPLICATION, reason, f"container {name} failed: {detail}", code)
        return Classification(Outcome.APPLICATION, pod_reason or "Failed", status.get("message") or "the pod failed")
    scheduled = conditions.get("PodScheduled")
    if phase == "Pending" and scheduled and scheduled.get("status") == "False":
        return Classification(
            Outcome.UNSCHEDULABLE, scheduled.get("reason") or "Unschedulable", scheduled.get("message") or ""
        )
    return Classification(Outcome.RUNNING, phase or "Unknown")

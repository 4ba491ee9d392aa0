"""What ended a run: preemption, eviction, no capacity, infrastructure, or the application itself.

The operators retry on a preemption and must not on a bug, so the difference has to be read off
the status the platform reports. Input is the Kubernetes API's pod as a dict (``V1Pod`` sanitised
with ``ApiClient().sanitize_for_serialization``); the rules are a table below, each with the
status shape it recognises (DESIGN.md: Kubernetes facts).

The order of the rules matters, because one signal can mean two things:

* ``DisruptionTarget`` with reason ``TerminationByKubelet`` is what the kubelet writes for a
  graceful node shutdown (a spot reclaim), for node-pressure eviction and for preemption by a
  critical pod. ``status.reason`` (``Terminated`` / ``Evicted`` / ``Preempting``) or, before the
  pod is terminal, the condition's message tells them apart.
* ``status.reason`` ``Evicted`` is also what the kubelet writes when the pod exceeded its *own*
  ephemeral-storage limit. That is the workload's fault (it would happen again on any node), so
  the kubelet's messages for it are recognised first and never count as an interruption.
* A shape none of the rules knows is ``UNKNOWN``: never a non-retryable application failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    SUCCEEDED = "succeeded"
    PREEMPTED = "preempted"  # the capacity was taken back: spot reclaim, node shutdown, node gone
    EVICTED = "evicted"  # moved off its node: drain, node pressure
    UNSCHEDULABLE = "unschedulable"  # no node offers what it asks for (yet)
    INFRASTRUCTURE = "infrastructure"  # the platform could not run it: image pull, bad config
    APPLICATION = "application"  # the workload failed: non-zero exit, OOMKilled, own storage limit
    DELETED = "deleted"  # deleted through the API by a person or a controller while its node stayed
    UNKNOWN = "unknown"  # a final state no rule recognises: fail, but let Airflow's retries run
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
#: ``TerminationByKubelet`` is split further by ``_kubelet_termination``: node shutdown and
#: critical-pod preemption are PREEMPTED, node-pressure eviction is EVICTED.
DISRUPTION_REASONS: dict[str, Outcome] = {
    "TerminationByKubelet": Outcome.PREEMPTED,  # graceful node shutdown (spot reclaim); see above
    "PreemptionByScheduler": Outcome.PREEMPTED,  # a higher-priority pod took the node
    "DeletionByTaintManager": Outcome.PREEMPTED,  # NoExecute taint, e.g. node not ready
    "DeletionByPodGC": Outcome.PREEMPTED,  # the node is gone
    "EvictionByEvictionAPI": Outcome.EVICTED,  # kubectl drain, cluster autoscaler scale-down
}
#: ``status.reason`` of a pod that the node, not the workload, ended.
POD_REASONS: dict[str, tuple[Outcome, bool]] = {
    "Terminated": (Outcome.PREEMPTED, True),  # "Pod was terminated in response to imminent node shutdown."
    "Shutdown": (Outcome.PREEMPTED, True),  # the same, Kubernetes 1.20 and 1.21
    "NodeShutdown": (Outcome.PREEMPTED, True),  # "Pod was rejected as the node is shutting down."
    "NodeLost": (Outcome.PREEMPTED, True),
    "Preempting": (Outcome.PREEMPTED, True),  # the kubelet made room for a critical pod
    "Evicted": (Outcome.EVICTED, True),  # node-pressure eviction (own storage limits are caught first)
    "UnexpectedAdmissionError": (Outcome.INFRASTRUCTURE, True),  # e.g. the device plugin lost a GPU
}
#: The kubelet's ``status.reason`` when it rejects a pod at admission for lack of a resource:
#: ``OutOf`` + the resource name, for every resource (``OutOfcpu``, ``OutOfnvidia.com/gpu``,
#: ``OutOfamd.com/gpu``, ``OutOfnvidia.com/mig-1g.10gb``, ...; kubelet ``lifecycle/predicate.go``).
OUT_OF_RESOURCE_PREFIX = "OutOf"
#: The kubelet eviction manager's messages when a pod exceeds its *own* ephemeral-storage limits
#: (``pkg/kubelet/eviction/helpers.go``: podEphemeralStorageMessageFmt,
#: containerEphemeralStorageMessageFmt, emptyDirMessageFmt; each ends in ". ").
EPHEMERAL_STORAGE_MESSAGES = (
    re.compile(r"Pod ephemeral local storage usage exceeds the total limit of containers \S+"),
    re.compile(r"Container \S+ exceeded its local ephemeral storage limit \"[^\"]*\""),
    re.compile(r"Usage of EmptyDir volume \"[^\"]*\" exceeds the limit \"[^\"]*\""),
)
#: How the eviction manager's node-pressure messages begin (nodeLowMessageFmt, and
#: nodeConditionMessageFmt when it rejects a pod at admission under pressure).
NODE_PRESSURE_MESSAGES = ("The node was low on resource:", "The node had condition:")
#: ``DisruptionTarget`` messages the kubelet writes with ``TerminationByKubelet`` for a reclaim.
KUBELET_PREEMPTION_MESSAGES = (
    "Pod was terminated in response to imminent node shutdown.",  # nodeshutdown manager
    "Pod was preempted by Kubelet to accommodate a critical pod.",  # kubelet preemption
)
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
#: Exit codes of a process ended by SIGKILL / SIGTERM (128 + signal) rather than by itself.
SIGNAL_EXIT_CODES = frozenset({137, 143})


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def _disruption(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``DisruptionTarget=True`` condition, if the pod carries one."""
    condition = _conditions(pod).get("DisruptionTarget")
    return condition if condition and condition.get("status") == "True" else None


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


def ephemeral_storage_violation(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's message if it evicted the pod for exceeding its own ephemeral-storage limit."""
    status = pod.get("status") or {}
    disruption = _disruption(pod) or {}
    for text in (status.get("message"), disruption.get("message")):
        if isinstance(text, str) and any(pattern.search(text) for pattern in EPHEMERAL_STORAGE_MESSAGES):
            return text.strip()
    return None


def _is_node_pressure(message: str) -> bool:
    return message.lstrip().startswith(NODE_PRESSURE_MESSAGES)


def _kubelet_termination(status: Mapping[str, Any], disruption: Mapping[str, Any]) -> Outcome:
    """``TerminationByKubelet`` means a node shutdown, node pressure or a critical pod: which one?"""
    pod_reason = status.get("reason")
    if pod_reason == "Evicted":
        return Outcome.EVICTED
    if pod_reason in POD_REASONS:
        return POD_REASONS[pod_reason][0]
    message = disruption.get("message") or status.get("message") or ""
    if _is_node_pressure(message):
        return Outcome.EVICTED
    return Outcome.PREEMPTED  # node shutdown, critical-pod preemption, or a message we do not know


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def pod_ended_at(pod: Mapping[str, Any] | None) -> datetime | None:
    """When a pod's run ended, for ``SpotRun.finish``: its containers' last ``finishedAt``, else its
    ``deletionTimestamp`` (a pod that vanished with its node stopped no container); None: not told."""
    finished = [
        _parse_time(state.get("finishedAt")) for _n, kind, state in _container_states(pod or {}) if kind == "terminated"
    ]
    known = [moment for moment in finished if moment is not None]
    return max(known) if known else _parse_time(((pod or {}).get("metadata") or {}).get("deletionTimestamp"))


def _killed_by_deletion(pod: Mapping[str, Any]) -> bool:
    """A terminal pod that carries ``deletionTimestamp`` and stopped because of that deletion.

    The API server sets ``deletionTimestamp`` to the time of the DELETE plus the grace period
    (``deletionGracePeriodSeconds``); a container that finished at or after the DELETE was stopped
    by it. One that had finished before was not: the pod failed first and was deleted later.
    """
    metadata = pod.get("metadata") or {}
    deleting = _parse_time(metadata.get("deletionTimestamp"))
    if deleting is None:
        return False
    grace = metadata.get("deletionGracePeriodSeconds")
    requested = deleting - timedelta(seconds=grace if isinstance(grace, int) and 0 <= grace <= 86400 else 0)
    finished = [
        _parse_time(state.get("finishedAt")) for _n, kind, state in _container_states(pod) if kind == "terminated"
    ]
    known = [moment for moment in finished if moment is not None]
    return not known or max(known) >= requested - timedelta(seconds=1)  # timestamps have whole seconds


#: The signals a container runtime stops a container with (the kubelet's SIGTERM, an image's STOPSIGNAL of SIGINT).
STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT"})


def ended_on_a_deletion_signal(pod: Mapping[str, Any]) -> bool:
    """A pod being deleted or disrupted whose workload exited 0 because it was stopped: a workload that exits 0
    on the deletion's SIGTERM ends ``Succeeded`` (the kubelet's phase for exit codes 0) without having finished.
    Visible while a finalizer holds the pod (``utils.end_hold``).

    The profiler's end in a container's termination message (``profiling.termination``) decides
    (``_stopped``); a stop is no finish, whatever came after (PodGC deleting the completed pod). Without the
    profiler's word the phase stands, as documented: the timestamps cannot tell (the kubelet's final delete
    moves ``deletionTimestamp`` to the end, and a drain right after a finish dates its ``DisruptionTarget``
    within the same second)."""
    metadata = pod.get("metadata") or {}
    if not metadata.get("deletionTimestamp") and _disruption(pod) is None:
        return False
    end = _profiler_end(pod)
    return end is not None and _stopped(end)


def finished_with_result(pod: Mapping[str, Any] | None) -> bool:
    """The pod ended ``Succeeded`` and the profiler's end says its workload printed its result line (``"result"``
    ``kept``, or ``too long`` to carry in the message) and was not stopped (``_stopped``, whether or not a
    deletion or disruption shows on the pod): it declared its output and exited 0 of its own accord. What a
    training's main machine shows when the training finished (``spot.training_job.job_end``). False without
    the profiler's word."""
    if pod is None or (pod.get("status") or {}).get("phase") != "Succeeded":
        return False
    end = _profiler_end(pod)
    return end is not None and end.get("result") in PRINTED and not _stopped(end)


#: The profiler's ``result`` values for a workload that printed its result line.
PRINTED = ("kept", "too long")


def _profiler_end(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The profiler's end line from a container's termination message; it writes one on exit 0 only."""
    from airflow_gpu.profiling import termination

    for _name, kind, state in _container_states(pod):
        if kind == "terminated" and state.get("exitCode") == 0:
            end = termination.read(state.get("message"))[1]
            if end is not None:
                return end
    return None


def _stopped(end: Mapping[str, Any]) -> bool:
    """A stop signal reached the workload before it exited, or it ended on a spot notice without its result (a
    workload may stop early on the notice file); a notice it ran past to its result is no stop."""
    noticed = bool(end.get("spot_notice")) and end.get("result") not in PRINTED
    return bool(STOP_SIGNALS & set(end.get("signals") or ())) or noticed


def completed_before_deletion(pod: Mapping[str, Any] | None, container: str) -> bool:
    """Whether the pod's workload had succeeded before anything deleted or disrupted the pod.

    True for a pod seen ``Succeeded`` (unless it ended on a deletion's signal: ``ended_on_a_deletion_signal``),
    and for one whose ``container`` (the base container) had
    terminated with exit code 0 before the deletion was requested (``deletionTimestamp`` less the
    grace period, as ``_killed_by_deletion``) and before its ``DisruptionTarget`` condition was set:
    a drain, PodGC or a person that deletes a completed pod before the task read its end takes
    nothing from the run (issue 26: such a pod was taken for a preemption and run again). A pod seen
    neither deleting nor disrupted after its exit 0 completed too. False when it cannot be told, as for
    a pod the kubelet itself ended (``status.reason`` ``Terminated``, ``Evicted``...) without a dated
    ``DisruptionTarget`` (a kubelet before 1.26): its exit 0 may have been the shutdown's SIGTERM.
    """
    if pod is None:
        return False
    if (pod.get("status") or {}).get("phase") == "Succeeded":
        return not ended_on_a_deletion_signal(pod)
    ended = [
        state for name, kind, state in _container_states(pod)
        if name == container and kind == "terminated" and state.get("exitCode") == 0
    ]  # fmt: skip
    if not ended:
        return False
    finished = _parse_time(ended[-1].get("finishedAt"))
    metadata = pod.get("metadata") or {}
    deleting = _parse_time(metadata.get("deletionTimestamp"))
    disruption = _disruption(pod)
    disrupted = _parse_time(disruption.get("lastTransitionTime")) if disruption else None
    if deleting is not None:
        grace = metadata.get("deletionGracePeriodSeconds")
        deleting -= timedelta(seconds=grace if isinstance(grace, int) and 0 <= grace <= 86400 else 0)
    stops = [moment for moment in (deleting, disrupted) if moment is not None]
    if (disruption is not None or metadata.get("deletionTimestamp")) and not stops:
        return False  # deleting or disrupted at an unknown moment: the exit may have been its SIGTERM's
    if (pod.get("status") or {}).get("reason") in POD_REASONS and disrupted is None:
        return False  # the kubelet ended it (node shutdown, eviction) at a moment only DisruptionTarget dates
    if finished is None:
        return not stops
    return all(finished < moment - timedelta(seconds=1) for moment in stops)  # whole seconds: strictly before


def disrupted_by(pod: Mapping[str, Any] | None) -> str | None:
    """Who disrupted the pod, as its ``DisruptionTarget`` condition says ("EvictionByEvictionAPI: a drain's
    eviction"), for a message; None when the pod carries none."""
    disruption = _disruption(pod or {})
    if disruption is None:
        return None
    reason = disruption.get("reason") or "DisruptionTarget"
    message = (disruption.get("message") or "").strip()
    return f"DisruptionTarget {reason}" + (f": {message}" if message else "")


def classify_pod(pod: Mapping[str, Any] | None) -> Classification:
    """Classify a pod as the API returned it; None means the pod no longer exists.

    For a pod that is gone, ``classify_deleted_pod`` tells a deletion through the API from a
    lost node when the caller knows the last state it saw and whether the node still exists.
    """
    if pod is None:
        return Classification(
            Outcome.PREEMPTED,
            "PodDeleted",
            "the pod disappeared before it finished (deleted with its node?)",
            transient=True,
        )
    status = pod.get("status") or {}
    phase = status.get("phase")
    pod_reason = status.get("reason")
    pod_message = (status.get("message") or "").strip()
    if phase == "Succeeded" and not ended_on_a_deletion_signal(pod):
        return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
    if phase == "Succeeded" and _disruption(pod) is None:
        return Classification(
            Outcome.DELETED,
            "Deleted",
            "the pod was deleted while it ran and its workload exited 0 on the deletion's signal (the profiler "
            "saw it): it did not finish",
            transient=True,
        )
    own_storage = ephemeral_storage_violation(pod)
    if own_storage is not None:
        return Classification(
            Outcome.APPLICATION,
            "EphemeralStorageLimitExceeded",
            f"the kubelet evicted the pod for exceeding its own ephemeral-storage limit ({own_storage}); "
            "it would happen again on any node: raise resources.limits.ephemeral-storage or the emptyDir "
            "sizeLimit, or write less to local disk",
        )
    if pod_reason == "Evicted":  # node-pressure eviction, with or without DisruptionTarget (< 1.26)
        return Classification(
            Outcome.EVICTED, "Evicted", pod_message or "evicted by the kubelet under node pressure", transient=True
        )
    disruption = _disruption(pod)
    if disruption is not None:
        reason = disruption.get("reason") or "DisruptionTarget"
        if reason == "TerminationByKubelet":
            outcome = _kubelet_termination(status, disruption)
        else:
            outcome = DISRUPTION_REASONS.get(reason, Outcome.PREEMPTED)
        message = (disruption.get("message") or pod_message or "").strip()
        return Classification(outcome, reason, message, transient=True)
    if pod_reason in POD_REASONS:
        outcome, transient = POD_REASONS[pod_reason]
        return Classification(outcome, pod_reason, pod_message, transient=transient)
    if isinstance(pod_reason, str) and pod_reason.startswith(OUT_OF_RESOURCE_PREFIX) and pod_reason != "OutOf":
        resource = pod_reason[len(OUT_OF_RESOURCE_PREFIX) :]
        return Classification(
            Outcome.INFRASTRUCTURE,
            pod_reason,
            f"the kubelet rejected the pod at admission: its node had no free {resource}"
            + (f" ({pod_message})" if pod_message else ""),
            transient=True,
        )
    for name, _kind, state in _container_states(pod):
        reason = state.get("reason", "")
        if reason in INFRASTRUCTURE_REASONS:
            message = state.get("message") or f"container {name}: {reason}"
            return Classification(Outcome.INFRASTRUCTURE, reason, message, state.get("exitCode"))
    if phase == "Failed":
        if _killed_by_deletion(pod):
            return Classification(
                Outcome.DELETED,
                "Deleted",
                "the pod was deleted through the API (kubectl delete or a controller) while it ran, "
                "without a DisruptionTarget condition: not a spot interruption",
                transient=True,
            )
        failed = [(n, s) for n, kind, s in _container_states(pod) if kind == "terminated" and s.get("exitCode")]
        signalled = all(s.get("exitCode") in SIGNAL_EXIT_CODES and s.get("reason") != "OOMKilled" for _, s in failed)
        if failed and not (pod_reason and signalled):
            name, state = failed[-1]
            reason = state.get("reason") or "Error"
            code = state.get("exitCode")
            detail = "out of memory (OOMKilled)" if reason == "OOMKilled" else f"exit code {code}"
            return Classification(Outcome.APPLICATION, reason, f"container {name} failed: {detail}", code)
        # No container failed by itself, or an unknown pod-level reason with containers that were
        # killed by a signal: something we do not recognise stopped it.
        return _unknown(phase, pod_reason, pod_message)
    scheduled = _conditions(pod).get("PodScheduled")
    if phase == "Pending" and scheduled and scheduled.get("status") == "False":
        return Classification(
            Outcome.UNSCHEDULABLE, scheduled.get("reason") or "Unschedulable", scheduled.get("message") or ""
        )
    if phase in (None, "Pending", "Running"):
        return Classification(Outcome.RUNNING, phase or "Unknown")
    return _unknown(phase, pod_reason, pod_message)  # phase Unknown (node unreachable) or anything else


def _unknown(phase: Any, reason: Any, message: str) -> Classification:
    detail = f"phase {phase}" + (f", reason {reason}" if reason else "") + (f": {message}" if message else "")
    return Classification(
        Outcome.UNKNOWN,
        str(reason or phase or "Unknown"),
        f"unrecognised pod state ({detail}); not known to be the workload's fault",
    )


def classify_deleted_pod(
    last_seen_pod: Mapping[str, Any] | None, node_exists: bool | None, container: str | None = None
) -> Classification:
    """Classify a pod that is gone (the API answers 404) from what was seen of it before.

    ``last_seen_pod`` is the last state the operator read or watched (None if it never saw one);
    ``node_exists`` says whether the node it was bound to is still in the API (None: not known,
    e.g. it was never bound or the node could not be read).

    * The last state already tells (a ``DisruptionTarget`` condition, or a final state such as an
      application failure or a node shutdown): that classification.
    * The node is gone: PREEMPTED (``NodeDeleted``), the capacity went away with it.
    * The node still exists and the pod carried no ``DisruptionTarget``: a person or a controller
      deleted it through the API (``kubectl delete pod``). DELETED: not an interruption, the try
      fails with Airflow's retries allowed.
    * Not known: PREEMPTED ``PodDeleted``, as ``classify_pod(None)``.

    Before all of these: a pod whose ``container`` (the base container) was last seen ended with
    exit code 0 before the deletion or disruption (``completed_before_deletion``) SUCCEEDED: a drain
    or PodGC that deletes a completed pod before the task read its end interrupted nothing.

    A taint-manager or PodGC deletion whose ``DisruptionTarget`` update the caller never saw looks
    like a deletion through the API while the node object remains; pass ``node_exists=False`` for
    a node that is NotReady or being removed.
    """
    if container is not None and completed_before_deletion(last_seen_pod, container):
        return Classification(Outcome.SUCCEEDED, "Succeeded", exit_code=0)
    if last_seen_pod is not None:
        seen = classify_pod(last_seen_pod)
        if _disruption(last_seen_pod) is not None or seen.outcome not in (
            Outcome.RUNNING,
            Outcome.UNSCHEDULABLE,
            Outcome.UNKNOWN,
            Outcome.DELETED,
        ):
            return seen
    node = ((last_seen_pod or {}).get("spec") or {}).get("nodeName")
    on = f" {node}" if node else ""
    if node_exists is False:
        return Classification(
            Outcome.PREEMPTED,
            "NodeDeleted",
            f"the pod disappeared together with its node{on} (spot reclaim or scale-down)",
            transient=True,
        )
    if node_exists:
        return Classification(
            Outcome.DELETED,
            "Deleted",
            f"the pod was deleted through the API (kubectl delete or a controller) while its node{on} still "
            "exists, without a DisruptionTarget condition: not a spot interruption",
            transient=True,
        )
    return classify_pod(None)


#: Node taints that say the node is being taken away: drained for a spot interruption or a
#: consolidation (Karpenter), scaled down (cluster-autoscaler), cordoned, or lost.
NODE_GOING_TAINTS = frozenset(
    {
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
        "ToBeDeletedByClusterAutoscaler",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/out-of-service",
    }
)


def node_stays(node: Mapping[str, Any]) -> bool:
    """Whether a node (as the API returns it) is there to stay, for ``classify_deleted_pod``.

    A pod deleted while its node is cordoned, tainted for removal or not Ready went with the
    capacity (a drain through the Eviction API, a reclaim), not by a person's hand.
    """
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return False
    if any(t.get("key") in NODE_GOING_TAINTS for t in spec.get("taints") or []):
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"

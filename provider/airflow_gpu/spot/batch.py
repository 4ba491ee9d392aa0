"""Spot on AWS Batch: read a job's attempts with the shared outcomes, and the retry strategy to ask for.

A Batch job reports what ended each attempt in ``attempts[].statusReason`` and
``attempts[].container`` (exit code, reason). The shapes recognised here come from the Batch
documentation (DESIGN.md: AWS Batch facts): a spot reclaim is ``Host EC2 (instance i-...)
terminated.`` with exit code 143 or none; an image that cannot be pulled is a container reason
``CannotPullContainerError: ...``; ``OutOfMemoryError`` is the application's, as OOMKilled is on
Kubernetes.

No capacity is read off the job's *state*, never off a status reason alone: AWS sets
``CAPACITY:...`` only on the job at the head of the queue, and only when the service role may read
the scaling activities, so most stuck jobs carry no reason. A job RUNNABLE for longer than
``capacity_timeout`` (``CapacityClock``) is unschedulable; the operator cancels it, and a job that
a cancel (ours, or the queue's ``jobStateTimeLimitActions``) ended is unschedulable too. The
outcomes are ``airflow_gpu.spot.classifier``'s, so ``next_step`` decides for both backends.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.start_failure import program_named

RECLAIM_PREFIX = "Host EC2"
#: Container reasons (the part before ``:``) that mean Batch/ECS could not run the container.
INFRASTRUCTURE_REASONS: dict[str, bool] = {  # reason -> transient
    "CannotPullContainerError": False,
    "CannotCreateContainerError": True,
    "CannotStartContainerError": True,
    "CannotInspectContainerError": True,
    "CannotStopContainerError": True,
    "ResourceInitializationError": True,
    "DockerTimeoutError": True,
    "TaskFailedToStart": True,
}
#: Container-reason texts of a start failure that the job's own configuration causes: running it
#: again, on this host or any other, fails the same way, so it is never resubmitted. The shapes are
#: ECS's and containerd's, as Batch passes them on (DESIGN.md: AWS Batch facts; the ECS "Stopped
#: tasks error codes" and "CannotPullContainer task errors" pages): a log group that does not
#: exist, a secret or parameter that is missing or not readable by the execution role, an image
#: reference that does not resolve or may not be pulled, a command that is not in the image.
CONFIGURATION_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"log group does not exist",
        r"failed to (?:initialize logging driver|validate logger args).*(?:ResourceNotFoundException|AccessDenied)",
        r"unable to (?:pull|retrieve) secrets?.*(?:ResourceNotFoundException|AccessDenied|ParameterNotFound"
        r"|InvalidParameter|ValidationException)",
        r"ParameterNotFound",
        r"invalid reference format",
        r"manifest (?:unknown|for .* not found)",
        r"repository (?:does not exist|.* not found)",
        r"pull access denied",
        r"no basic auth credentials",
        r"failed to resolve reference .*(?:not found|403 Forbidden|401 Unauthorized)",
        r"executable file not found in \$PATH",
        r"unable to start container process: exec: .*no such file or directory",
        r"exec format error",
        r"starting container process caused.*no such file or directory",
    )
)
#: Texts of a pull failure that the network or the registry's load causes, not the reference.
TRANSIENT_PULL_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"i/o timeout",
        r"context deadline exceeded",
        r"connection reset",
        r"toomanyrequests|too many requests|rate limit",
        r"(?:500|502|503|504) (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)",
        r"net/http: request canceled",
    )
)
#: Status reasons of a job cancelled because it could not get capacity: ours (``CancelJob`` past
#: ``capacity_timeout``) and the queue's ``jobStateTimeLimitActions``.
CAPACITY_CANCEL_PREFIX = "airflow-gpu: no capacity"
TIME_LIMIT_CANCEL_PREFIX = "Canceled by JobStateTimeLimit action"
FINAL = ("SUCCEEDED", "FAILED")
#: CancelJob's reason for a job that a try whose supervisor died left for a retry, and no retry took over in time
#: (``operators.orphaned_try``): a retry that follows it after all (its mark was lost) runs the work anew.
ORPHAN_CANCEL_PREFIX = "airflow-gpu: left for a retry that did not come"
#: TerminateJob reasons of a task that killed its own job (Mark Failed, on_kill; a deferral past
#: execution_timeout; a deferral that failed): such a job is never taken over by a later try.
KILLED = ("Task killed by the user", "airflow-gpu: execution_timeout", "airflow-gpu: the deferral failed")


@dataclass
class CapacityClock:
    """How long a job has waited RUNNABLE without a break; fed one observation per poll.

    A job that leaves RUNNABLE (STARTING, RUNNING, back to RUNNABLE after Batch retried a
    reclaimed attempt) starts a fresh wait.
    """

    timeout: float
    since: float | None = None

    def expired(self, status: str | None, now: float) -> bool:
        if status != "RUNNABLE":
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since > self.timeout


def queue_name(job: Mapping[str, Any]) -> str:
    """The job's queue by name (DescribeJobs gives its ARN)."""
    return str(job.get("jobQueue", "")).rsplit("/", 1)[-1]


def capacity_cancel_reason(job: Mapping[str, Any], timeout: float) -> str:
    """The CancelJob reason for a job RUNNABLE past ``timeout``; it names AWS's reason when there is one."""
    reason = job.get("statusReason")
    detail = f": {reason}" if reason else " (AWS gave no reason; see docs/batch.rst)"
    return f"{CAPACITY_CANCEL_PREFIX}, RUNNABLE for longer than capacity_timeout={timeout:g}s{detail}"[:1024]


def is_reclaim(status_reason: str | None) -> bool:
    return bool(status_reason) and str(status_reason).startswith(RECLAIM_PREFIX)


def start_failure_is_transient(reason: str) -> bool:
    """Whether a container that could not start (``CannotStartContainerError: ...``) may start when
    submitted again: not when its configuration is the cause (``CONFIGURATION_PATTERNS``), nor for a
    pull failure unless the network or the registry's load caused it; a host-level cause (a timeout
    of the container runtime, a full disk, a port another task holds) is worth another host."""
    if any(pattern.search(reason) for pattern in CONFIGURATION_PATTERNS):
        return False
    kind = reason.split(":", 1)[0]
    if kind == "CannotPullContainerError":
        return any(pattern.search(reason) for pattern in TRANSIENT_PULL_PATTERNS)
    return INFRASTRUCTURE_REASONS.get(kind, False)


def missing_program(job: Mapping[str, Any]) -> str | None:
    """The program a FAILED job's container could not execute at its start (``/bin/sh`` in a
    distroless image), from its last attempt's reason; None for any other ending."""
    attempts = job.get("attempts") or []
    if job.get("status") != "FAILED" or not attempts:
        return None
    reason = str((attempts[-1].get("container") or {}).get("reason") or "")
    if not reason.startswith("CannotStartContainerError"):
        return None
    return program_named(reason)  # runc's words, as ECS passes Docker's error on


def classify_attempt(attempt: Mapping[str, Any]) -> Classification:
    """What ended one attempt (an item of ``attempts[]``)."""
    container = attempt.get("container") or {}
    exit_code = container.get("exitCode")
    status_reason = attempt.get("statusReason") or ""
    reason = container.get("reason") or ""
    if is_reclaim(status_reason):
        return Classification(Outcome.PREEMPTED, "SpotReclaim", status_reason, exit_code, transient=True)
    kind = reason.split(":", 1)[0]
    if kind in INFRASTRUCTURE_REASONS:
        return Classification(Outcome.INFRASTRUCTURE, kind, reason, exit_code, start_failure_is_transient(reason))
    if kind == "OutOfMemoryError":
        return Classification(Outcome.APPLICATION, "OutOfMemoryError", reason, exit_code)
    if exit_code == 0:
        return Classification(Outcome.SUCCEEDED, "Succeeded", status_reason, 0)
    message = f"exit code {exit_code}" if exit_code is not None else "no exit code"
    detail = "; ".join(part for part in (reason, status_reason) if part)
    return Classification(Outcome.APPLICATION, "Error", f"{message}" + (f" ({detail})" if detail else ""), exit_code)


def classify_job(job: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]] | None = None) -> Classification:
    """What ended a job as DescribeJobs returns it: a capacity cancel, else its last attempt.

    A job not yet ended is RUNNING whatever its status reason; how long it has waited is the
    ``CapacityClock``'s business. ``nodes``: a multi-node job's child nodes (``child_node_ids``), of
    which one that lost its host makes the job's failure an interruption (``lost_node``).
    """
    status = job.get("status")
    status_reason = job.get("statusReason") or ""
    if status not in FINAL:
        return Classification(Outcome.RUNNING, str(status), status_reason)
    attempts = job.get("attempts") or []
    if status == "SUCCEEDED":
        return Classification(Outcome.SUCCEEDED, "Succeeded", status_reason, 0)
    if status_reason.startswith(CAPACITY_CANCEL_PREFIX):
        return Classification(Outcome.UNSCHEDULABLE, "CapacityTimeout", status_reason)
    if status_reason.startswith(TIME_LIMIT_CANCEL_PREFIX):
        return Classification(Outcome.UNSCHEDULABLE, "JobStateTimeLimit", status_reason)
    if status_reason.startswith(ORPHAN_CANCEL_PREFIX):  # nothing of the workload's: submitted again
        return Classification(Outcome.INFRASTRUCTURE, "OrphanCancel", status_reason, transient=True)
    if not attempts:  # failed before any attempt ran: cancelled, dependency failed, bad definition
        if is_reclaim(status_reason):
            return Classification(Outcome.PREEMPTED, "SpotReclaim", status_reason, transient=True)
        return Classification(Outcome.INFRASTRUCTURE, "NoAttempt", status_reason or "failed before it started")
    final = classify_attempt(attempts[-1])
    return lost_node(job, nodes, final) or final


def classify_attempts(
    job: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Classification]:
    """Every attempt of a job, in order (Batch retried the reclaimed ones itself); the last one a lost node's
    interruption where ``lost_node`` says so."""
    found = [classify_attempt(a) for a in job.get("attempts") or []]
    if found and job.get("status") == "FAILED" and (lost := lost_node(job, nodes, found[-1])) is not None:
        found[-1] = lost
    return found


def child_node_ids(job: Mapping[str, Any]) -> list[str]:
    """The nodes (``<jobId>#<n>``) of a RUNNING or FAILED multi-node parallel job, its main node last: to stop it
    once a child node lost its host (``failed_child``), and to tell whether one did (``lost_node``); none for any
    other job."""
    properties = job.get("nodeProperties") or {}
    if job.get("status") not in ("RUNNING", "FAILED") or not isinstance(properties.get("numNodes"), int):
        return []
    main = properties.get("mainNode", 0)
    children = [f"{job['jobId']}#{index}" for index in range(properties["numNodes"]) if index != main]
    return [*children, f"{job['jobId']}#{main}"]


#: TerminateJob's reason for a multi-node job stopped because one of its child nodes lost its host while it ran.
NODE_FAILED_PREFIX = "airflow-gpu: a node of the job lost its host"


def _nodes_in_order(nodes: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(nodes.values(), key=lambda n: (n.get("nodeDetails") or {}).get("nodeIndex", 0))


def _host_lost(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A child node's last attempt when it ended with its host lost (the attempt's reason, else the node's)."""
    if (node.get("nodeDetails") or {}).get("isMainNode") or node.get("status") != "FAILED":
        return None
    last = (node.get("attempts") or [{}])[-1]
    reason = last.get("statusReason") or node.get("statusReason")
    times = {k: last.get(k) or node.get(k) for k in ("startedAt", "stoppedAt")}  # no attempt: the node's own
    return {**last, **times, "statusReason": reason} if is_reclaim(reason) else None


def _began(attempt: Mapping[str, Any]) -> float:
    """When an attempt started, or ended if it never started (a host lost while STARTING): 0 if unknown."""
    return float(attempt.get("startedAt") or attempt.get("stoppedAt") or 0)


def failed_child(job: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The TerminateJob reason for a RUNNING multi-node job one of whose child nodes lost its host, or None.

    Batch takes no action on the other nodes when a child node fails ("If a child node dies, AWS Batch doesn't
    take any action on the other nodes in the job"), and a distributed training's main node waits on the lost
    peer until its collective times out (PyTorch's default: 30 minutes of every node billed): the soak's
    two-machine training still ran 45 s after it lost a node. A lost host is the platform's doing, so the job is
    stopped and submitted again (``lost_node``), as a Kubernetes training Job is when a machine is reclaimed. A
    child that failed by its own exit is left to the main node, which decides the job's end as AWS documents (a
    rank that exits non-zero at teardown must not kill the main one while it saves the model). Only a child of
    the current attempt counts: one that began before the main node's current run (``nodes`` holds the main
    node) is the last attempt's, not yet relaunched ("no guarantees on the timing" of child launches)."""
    if job.get("status") != "RUNNING":
        return None
    main = next((n for n in nodes.values() if (n.get("nodeDetails") or {}).get("isMainNode")), None)
    since = float((main or {}).get("startedAt") or 0)
    if not since:  # the main node's current run is not known: nothing is stopped on a guess
        return None
    for node in _nodes_in_order(nodes):
        lost = _host_lost(node)
        if lost is not None and _began(lost) >= since:
            index = (node.get("nodeDetails") or {}).get("nodeIndex", "?")
            return f"{NODE_FAILED_PREFIX}: node {index} ({lost['statusReason']})"[:1024]
    return None


def lost_node(
    job: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]] | None, final: Classification
) -> Classification | None:
    """A multi-node job whose main node failed after a child node of the same attempt lost its host: an
    interruption (the node's), not the workload's failure.

    Multi-node parallel jobs run on on-demand EC2 only, and an instance can still go (a hardware failure, a
    retirement): Batch then fails that node alone, with the ``Host EC2`` reason a spot reclaim has ("If a
    child node dies, AWS Batch doesn't take any action on the other nodes in the job"; "Child node failures
    don't cause more attempts to occur", AWS Batch User Guide, "Multi-node parallel jobs"). A distributed
    training's main node sees its peer gone and fails (or waits on it, and ``failed_child`` stops the job), which
    alone reads as the training's own failure. The child's attempt must lie within the main node's last one:
    begun no earlier (the main node is launched first; a host lost while STARTING has only its end) and ended
    no later (a child whose host went in the teardown after the main node failed on its own is no cause). Only
    a main node that failed by its exit counts (an ``APPLICATION`` outcome): a reclaim of the main node is one
    already, a kill is the task's."""
    attempts = job.get("attempts") or []
    if not nodes or not attempts or final.outcome is not Outcome.APPLICATION:
        return None
    since, until = _began(attempts[-1]), float(attempts[-1].get("stoppedAt") or 0)
    for node in _nodes_in_order(nodes):
        lost = _host_lost(node)
        if lost is None or _began(lost) < since or (until and float(lost.get("stoppedAt") or 0) > until):
            continue
        return Classification(
            Outcome.PREEMPTED, "NodeLost",
            f"node {(node.get('nodeDetails') or {}).get('nodeIndex', '?')} lost its host ({lost['statusReason']}); "
            f"the main node then ended with {final.message}",
            final.exit_code, transient=True,
        )  # fmt: skip
    return None


def attempts_ended_at(job: Mapping[str, Any]) -> list[datetime | None]:
    """When each attempt of ``classify_attempts`` ended, for ``SpotRun.finish``: its ``stoppedAt``
    (epoch milliseconds, AWS Batch API reference); a job without attempts, its own ``stoppedAt``."""
    attempts = job.get("attempts") or []
    stamps = [a.get("stoppedAt") for a in attempts] if attempts else [job.get("stoppedAt")]
    return [datetime.fromtimestamp(s / 1000, timezone.utc) if isinstance(s, int | float) else None for s in stamps]


def retry_strategy(policy: SpotPolicy) -> dict[str, Any]:
    """Batch retries spot reclaims itself, up to the policy's budget; everything else exits.

    ``attempts`` counts the first run, and Batch allows 10 at most. A reclaim past the budget
    leaves the job FAILED with a ``Host EC2`` reason, which the operator reads as "spot is
    exhausted" and answers with the on-demand queue when the policy allows it.
    """
    return {
        "attempts": max(1, min(10, policy.max_interruptions + 1)),
        "evaluateOnExit": [
            {"onStatusReason": f"{RECLAIM_PREFIX}*", "action": "RETRY"},
            {"onReason": "*", "action": "EXIT"},
        ],
    }

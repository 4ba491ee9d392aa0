"""Spot on AWS Batch: read a job's attempts with the shared outcomes, and the retry strategy to ask for.

A Batch job reports what ended each attempt in ``attempts[].statusReason`` and
``attempts[].container`` (exit code, reason). The shapes recognised here come from the Batch
documentation (DESIGN.md: AWS Batch facts): a spot reclaim is ``Host EC2 (instance i-...)
terminated.`` with exit code 143 or none; an image that cannot be pulled is a container reason
``CannotPullContainerError: ...``; ``OutOfMemoryError`` is the application's, as OOMKilled is on
Kubernetes. A job still RUNNABLE with a ``CAPACITY:`` or ``MISCONFIGURATION:`` status reason has
no capacity. The outcomes are ``airflow_gpu.spot.classifier``'s, so ``next_step`` decides for both
backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import SpotPolicy

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
RUNNABLE_REASONS = ("CAPACITY:", "MISCONFIGURATION:")


def is_reclaim(status_reason: str | None) -> bool:
    return bool(status_reason) and str(status_reason).startswith(RECLAIM_PREFIX)


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
        return Classification(Outcome.INFRASTRUCTURE, kind, reason, exit_code, INFRASTRUCTURE_REASONS[kind])
    if kind == "OutOfMemoryError":
        return Classification(Outcome.APPLICATION, "OutOfMemoryError", reason, exit_code)
    if exit_code == 0:
        return Classification(Outcome.SUCCEEDED, "Succeeded", status_reason, 0)
    message = f"exit code {exit_code}" if exit_code is not None else "no exit code"
    detail = "; ".join(part for part in (reason, status_reason) if part)
    return Classification(Outcome.APPLICATION, "Error", f"{message}" + (f" ({detail})" if detail else ""), exit_code)


def classify_job(job: Mapping[str, Any]) -> Classification:
    """What ended (or holds up) a job as DescribeJobs returns it: its last attempt decides."""
    status = job.get("status")
    status_reason = job.get("statusReason") or ""
    if status not in ("SUCCEEDED", "FAILED"):
        if status == "RUNNABLE" and status_reason.startswith(RUNNABLE_REASONS):
            return Classification(Outcome.UNSCHEDULABLE, status_reason.split(" ", 1)[0], status_reason)
        return Classification(Outcome.RUNNING, str(status), status_reason)
    attempts = job.get("attempts") or []
    if status == "SUCCEEDED":
        return Classification(Outcome.SUCCEEDED, "Succeeded", status_reason, 0)
    if not attempts:  # failed before any attempt ran: cancelled, dependency failed, bad definition
        if is_reclaim(status_reason):
            return Classification(Outcome.PREEMPTED, "SpotReclaim", status_reason, transient=True)
        return Classification(Outcome.INFRASTRUCTURE, "NoAttempt", status_reason or "failed before it started")
    return classify_attempt(attempts[-1])


def interruptions(job: Mapping[str, Any]) -> list[Classification]:
    """The attempts of a job that spot capacity ended (Batch retried them itself)."""
    return [c for c in map(classify_attempt, job.get("attempts") or []) if c.interrupted]


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

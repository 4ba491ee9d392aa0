"""The head of each job queue: the only job that shows why it is stuck, and what the queue does then.

AWS Batch reports a blocked-queue reason (``reasons.py``) on the RUNNABLE job at the head of the
queue, the oldest one; the jobs behind it show no ``statusReason`` even when they could not start
either. A queue's ``jobStateTimeLimitActions`` cancel that head job once it has stayed there with a
matching reason for ``maxTimeSeconds`` ("Canceled by JobStateTimeLimit action due to reason: ..."),
and the next job moves up. moto drops ``jobStateTimeLimitActions``, so they live on the moto
``JobQueue`` object as ``job_state_time_limit_actions`` (``patches.py`` puts them there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_gpu.testing.batch.jobs import EmulatedJob
from airflow_gpu.testing.batch.reasons import TIME_LIMIT_REASONS

#: AWS takes 600..86400 s; the emulator takes from 1 s, so that a test need not wait ten minutes.
MIN_TIME_SECONDS, MAX_TIME_SECONDS = 1, 86_400


def validate_time_limit_actions(actions: Iterable[Mapping[str, Any]]) -> str | None:
    """What is wrong with ``actions`` (a ``ClientException`` message), or None."""
    for action in actions:
        if action.get("state") != "RUNNABLE":
            return f"jobStateTimeLimitActions.state {action.get('state')!r} is not supported: only RUNNABLE is"
        if action.get("action") != "CANCEL":
            return (
                f"jobStateTimeLimitActions.action {action.get('action')!r} is not supported for job queues "
                "connected to Amazon ECS compute environments: only CANCEL is"
            )
        seconds = action.get("maxTimeSeconds")
        if not isinstance(seconds, int) or not MIN_TIME_SECONDS <= seconds <= MAX_TIME_SECONDS:
            return f"jobStateTimeLimitActions.maxTimeSeconds must be {MIN_TIME_SECONDS}..{MAX_TIME_SECONDS}"
        if not action.get("reason"):
            return "jobStateTimeLimitActions.reason is required"
    return None


def time_limit_actions(queue: Any) -> list[dict[str, Any]]:
    return list(getattr(queue, "job_state_time_limit_actions", None) or [])


def heads(jobs: Iterable[EmulatedJob]) -> dict[str, EmulatedJob]:
    """Queue ARN -> its oldest RUNNABLE job (submission order, as ``createdAt`` orders them)."""
    found: dict[str, EmulatedJob] = {}
    for job in jobs:
        if job.status != "RUNNABLE" or job.finished or job._child_jobs:
            continue
        current = found.get(job.job_queue.arn)
        if current is None or job.sequence < current.sequence:
            found[job.job_queue.arn] = job
    return found


def expired_action(queue: Any, code: str | None, seconds_at_head: float) -> dict[str, Any] | None:
    """The queue's action due for a head job blocked by ``code`` for ``seconds_at_head``, if any."""
    if code not in TIME_LIMIT_REASONS:
        return None
    for action in time_limit_actions(queue):
        if action["reason"] == code and seconds_at_head >= action["maxTimeSeconds"]:
            return action
    return None

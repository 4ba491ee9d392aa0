"""The task log's account of a workload the platform ended, the same from a worker and a trigger.

A spot run is carried on by the operator on a worker, or by a trigger in the triggerer (a pod, a
Batch job, a training Job); either way the task log says what ``SpotRun.finish`` just recorded,
each interruption numbered within the run (a Batch job whose reclaims Batch retried records
several at once), and what comes next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_gpu.spot.run import WORKLOAD_NOUN

if TYPE_CHECKING:
    from airflow_gpu.spot.policy import Decision
    from airflow_gpu.spot.run import SpotRun


def log_interruptions(log: Any, run: SpotRun, decision: Decision, workload: str, noun: str | None = None) -> None:
    """Warn of each interruption the last ``finish`` recorded, then of how ``workload`` ended.

    ``noun`` names the workload (default: the backend's, ``pod`` or ``job``).
    """
    first = len(run.interruptions) - len(run.recorded) + 1
    for number, record in enumerate(run.recorded, start=first):
        outcome, reason, then = record["outcome"], record["reason"], record["next"]
        log.warning("GPU interruption %d: %s (%s) on %s: %s", number, outcome, reason, workload, then)
    log.warning("The %s %s ended: %s", noun or WORKLOAD_NOUN[run.backend], workload, decision.message)

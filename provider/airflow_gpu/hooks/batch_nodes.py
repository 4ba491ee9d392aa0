"""A multi-node parallel job's child nodes while it runs: a training cannot go on without one.

Batch takes no action on the other nodes when a child node's host is lost, so the training's main node waits on its
lost peer (``spot.batch.failed_child``); the task (``GPUBatchOperator``'s wait) and the trigger
(``GPUBatchJobTrigger``) stop such a job here at each poll, and its end then says why (``spot.batch.lost_node``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_gpu.spot.batch import child_node_ids, failed_child


def stop_if_a_node_failed(hook: Any, job: Mapping[str, Any]) -> bool:
    """Terminate a RUNNING multi-node job one of whose child nodes lost its host; True when it did. One DescribeJobs of
    its child nodes per call, none for any other job. Reading the nodes or terminating may fail (throttled, an
    outage): the next poll asks again, so a failure is a warning here, not the task's or the trigger's end."""
    ids = child_node_ids(job)
    if job.get("status") != "RUNNING" or not ids:
        return False
    try:
        reason = failed_child(job, hook.describe_jobs_batched(ids))
        if reason is None:
            return False
        hook.log.warning("Stopping multi-node job %s: %s", job["jobId"], reason)
        hook.terminate(str(job["jobId"]), reason)
    except Exception as error:
        hook.log.warning("Could not check or stop the nodes of job %s (%s); asking again", job["jobId"], error)
        return False
    return True

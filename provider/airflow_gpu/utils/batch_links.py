"""What ties a task try to its AWS Batch job: the console links, and which job a retry takes over.

``BatchOperator`` fills its links through private methods that older amazon releases lack; the
link classes themselves are public and stable, so they are persisted here directly: the job, its
definition and queue as soon as the job is submitted (a deferred task shows them while it waits),
the CloudWatch stream of the job's last attempt once it has ended.

A retry after a worker crash takes over the job the dead process left (running or ended) if the
job's tags carry this task try's identity, so that it never submits a second one.

Utilities sit below the hooks: what these need of a hook (DescribeJobs, the connection's region and
partition) and of the operator (the saved state) is passed in, typed by the protocols below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from airflow.providers.amazon.aws.links.batch import BatchJobDefinitionLink, BatchJobDetailsLink, BatchJobQueueLink
from airflow.providers.amazon.aws.links.logs import CloudWatchEventsLink

from airflow_gpu.accelerators.batch_job import identity_problem
from airflow_gpu.spot.batch import FINAL, KILLED
from airflow_gpu.utils.batch_logs import attempt_streams, log_group

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context

    from airflow_gpu.spot.run import SpotRun


class JobReader(Protocol):
    """DescribeJobs for many ids (``GPUBatchHook``)."""

    def describe_jobs_batched(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]: ...


class AwsLocation(Protocol):
    """Where the connection points (an AWS hook): the links are built for that region and partition."""

    @property
    def conn_region_name(self) -> str: ...

    @property
    def conn_partition(self) -> str: ...


def earlier_job(
    context: Context, saved: Mapping[str, Any] | None, jobs: JobReader, run: SpotRun, log: Any
) -> dict[str, Any] | None:
    """This task try's job from a process that died (running or ended), with ``run`` restored.

    ``saved`` is the run's state the task saved while it was still open (the task state store). A
    job this task killed (Mark Failed, ``execution_timeout``) is never taken over: the run goes on
    with a new job. Without a job to take over, the run's placement and history stand.
    """
    job_id = saved.get("workload") if saved else None
    job = jobs.describe_jobs_batched([job_id]).get(job_id) if job_id else None
    mismatch = identity_problem(job.get("tags") or {}, context["ti"]) if job else None
    if saved is None or mismatch:
        if mismatch:
            log.warning("Not reattaching to job %s: %s", job_id, mismatch)
        return None
    if "version" not in saved and job is not None and job["status"] in FINAL:
        return None  # the release before took over running jobs only: an ended one is not this try's
    if ignored := run.restore(saved):
        log.warning("The saved GPU state is ignored (%s); job %s is this task's all the same", ignored, job_id)
    if job is None or str(job.get("statusReason") or "").startswith(KILLED):
        run.workload = None  # nothing to take over: a new job, where the run left off
        return None
    run.submitted(str(job_id))
    log.info("Reattached to AWS Batch job %s (%s) of an earlier try", job_id, job["status"])
    return job


def persist_job_links(context: Context, operator: BaseOperator, hook: AwsLocation, job: Mapping[str, Any]) -> None:
    where = {"region_name": hook.conn_region_name, "aws_partition": hook.conn_partition}
    BatchJobDetailsLink.persist(context=context, operator=operator, job_id=job["jobId"], **where)
    BatchJobDefinitionLink.persist(context=context, operator=operator, job_definition_arn=job["jobDefinition"], **where)
    BatchJobQueueLink.persist(context=context, operator=operator, job_queue_arn=job["jobQueue"], **where)


def persist_log_link(context: Context, operator: BaseOperator, hook: AwsLocation, job: Mapping[str, Any]) -> None:
    group, streams = log_group(job), attempt_streams(job)
    if group is None or not streams:
        return
    options = ((job.get("container") or {}).get("logConfiguration") or {}).get("options") or {}
    CloudWatchEventsLink.persist(
        context=context,
        operator=operator,
        region_name=hook.conn_region_name,
        aws_partition=hook.conn_partition,
        awslogs_region=options.get("awslogs-region") or hook.conn_region_name,
        awslogs_group=group,
        awslogs_stream_name=streams[-1],
    )

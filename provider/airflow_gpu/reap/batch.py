"""The provider's AWS Batch jobs in some job queues: listed, and stopped as the operator stops them.

ListJobs needs a job queue (or an array or multi-node parent) and, without ``filters``, one status
at a time (none given: RUNNING only), so each queue is listed once per live status; its summaries
carry no tags, so the jobs are then described, 100 ids a call (DescribeJobs' limit), and only those
with the provider's identity tags are candidates. No queue named: every queue DescribeJobQueues
shows. The client is boto3's with botocore's standard retry mode and our rounds on top
(``utils.batch_retries``), as the hooks' clients.

Stopping follows the Batch API reference (DESIGN.md, "AWS Batch facts"): CancelJob acts only on a
SUBMITTED, PENDING or RUNNABLE job and succeeds doing nothing on one that has started, so those
get CancelJob and a STARTING or RUNNING job gets TerminateJob (SIGTERM, then SIGKILL 30 s later). A
job can leave RUNNABLE between the listing and the cancel: one found started after its CancelJob
is terminated as well.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_gpu.reap.resources import LIVE_BATCH_STATUSES, Skipped, from_batch
from airflow_gpu.reap.rules import Resource
from airflow_gpu.utils.batch_retries import retry_transient, with_retries

#: DescribeJobs takes at most this many job ids.
DESCRIBE_LIMIT = 100
NOT_STARTED = frozenset({"SUBMITTED", "PENDING", "RUNNABLE"})
STARTED = frozenset({"STARTING", "RUNNING"})
LOG = logging.getLogger(__name__)


class BatchUnreachable(OSError):
    """Batch could not be listed: nothing there is judged."""


class BatchResources:
    """Candidates in some job queues (``client``: a boto3 Batch client)."""

    backend = "batch"

    def __init__(self, client: Any, queues: Sequence[str] = ()) -> None:
        self.client, self.queues = client, list(dict.fromkeys(queues))

    @classmethod
    def connect(cls, region: str | None, endpoint_url: str | None, queues: Sequence[str] = ()) -> BatchResources:
        import boto3
        from botocore.exceptions import BotoCoreError

        try:
            client = boto3.client("batch", region_name=region, endpoint_url=endpoint_url, config=with_retries(None))
        except BotoCoreError as error:  # no region, a bad endpoint URL
            raise BatchUnreachable(f"no AWS Batch client: {error}") from None
        return cls(client, queues)

    def find(self) -> tuple[list[Resource], list[Skipped]]:
        found: list[Resource] = []
        skipped: list[Skipped] = []
        ids = list(dict.fromkeys(self._job_ids()))
        for start in range(0, len(ids), DESCRIBE_LIMIT):
            chunk = ids[start : start + DESCRIBE_LIMIT]
            for job in self._call("DescribeJobs", lambda c=chunk: self.client.describe_jobs(jobs=c))["jobs"]:
                candidate = from_batch(job)
                if isinstance(candidate, Resource):
                    found.append(candidate)
                elif isinstance(candidate, Skipped):
                    skipped.append(candidate)
        return found, skipped

    def _job_ids(self) -> Iterator[str]:
        for queue in self.queues or self._all_queues():
            for status in LIVE_BATCH_STATUSES:
                token: str | None = None
                while True:
                    options: dict[str, Any] = {"jobQueue": queue, "jobStatus": status}
                    if token:
                        options["nextToken"] = token
                    page = self._call("ListJobs", lambda o=options: self.client.list_jobs(**o))
                    yield from (summary["jobId"] for summary in page.get("jobSummaryList") or [])
                    token = page.get("nextToken")
                    if not token:
                        break

    def _all_queues(self) -> list[str]:
        queues: list[str] = []
        token: str | None = None
        while True:
            options = {"nextToken": token} if token else {}
            page = self._call("DescribeJobQueues", lambda o=options: self.client.describe_job_queues(**o))
            queues += [q["jobQueueName"] for q in page.get("jobQueues") or []]
            token = page.get("nextToken")
            if not token:
                return queues

    def _call(self, what: str, call: Any) -> Any:
        try:
            return retry_transient(what, call, LOG)
        except Exception as error:
            raise BatchUnreachable(f"AWS Batch {what} failed ({type(error).__name__}: {error})") from None

    def delete(self, resource: Resource) -> str:
        """CancelJob before the job starts, TerminateJob once it has; returns what was done."""
        reason = (
            f"airflow-gpu reap: orphan of {resource.task.dag_id}.{resource.task.task_id} try {resource.task.try_number}"
        )
        job_id = resource.name
        try:
            if resource.status in NOT_STARTED:
                retry_transient("CancelJob", lambda: self.client.cancel_job(jobId=job_id, reason=reason[:1024]), LOG)
                jobs = retry_transient("DescribeJobs", lambda: self.client.describe_jobs(jobs=[job_id]), LOG)["jobs"]
                if not any(job["status"] in STARTED for job in jobs):
                    return "cancelled (CancelJob)"
            retry_transient("TerminateJob", lambda: self.client.terminate_job(jobId=job_id, reason=reason[:1024]), LOG)
            return (
                "terminated (TerminateJob)"
                if resource.status in STARTED
                else "started meanwhile: terminated (TerminateJob)"
            )
        except Exception as error:
            return f"FAILED: {type(error).__name__}: {error}"

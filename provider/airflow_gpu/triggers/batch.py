"""``GPUBatchJobTrigger``: wait for Batch jobs with one DescribeJobs call per 100 jobs, not per job.

The official ``BatchJobTrigger`` runs a waiter per task: 300 deferred shards make 300
DescribeJobs calls every interval, and Batch throttles DescribeJobs per account. Here every
trigger of the same connection, region and interval in a triggerer process registers its job
with one ``SharedJobPoller``, which asks for up to 100 ids per call and hands each trigger its
job. The trigger fires when the job ends, or when it has waited RUNNABLE for longer than
``capacity_timeout`` (the operator then cancels it and, if it did not start meanwhile, moves on).
DescribeJobs is retried with backoff when Batch throttles it (``GPUBatchHook``), and a job missing
from a few answers (DescribeJobs is eventually consistent) is asked for again before giving up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu.spot.batch import FINAL, KILLED, CapacityClock
from airflow_gpu.triggers.resume_dwell import dwell

#: Polling rounds a job may be missing from DescribeJobs before the trigger gives up on it.
MISSING_ROUNDS = 5


class SharedJobPoller:
    """One polling loop per (connection, region, interval) in this process, batching DescribeJobs."""

    _pollers: ClassVar[dict[tuple[str | None, str | None, float], SharedJobPoller]] = {}

    def __init__(self, aws_conn_id: str | None, region_name: str | None, interval: float) -> None:
        self.key = (aws_conn_id, region_name, interval)
        self.aws_conn_id, self.region_name, self.interval = aws_conn_id, region_name, interval
        self.waiting: dict[str, list[asyncio.Future[dict[str, Any] | None]]] = {}
        self.task: asyncio.Task[None] | None = None

    @classmethod
    def get(cls, aws_conn_id: str | None, region_name: str | None, interval: float) -> SharedJobPoller:
        key = (aws_conn_id, region_name, interval)
        if key not in cls._pollers:
            cls._pollers[key] = cls(aws_conn_id, region_name, interval)
        return cls._pollers[key]

    async def next_description(self, job_id: str) -> dict[str, Any] | None:
        """The job as the next polling round sees it; None if Batch does not know it."""
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(job_id, []).append(future)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._loop())
        try:
            return await future
        finally:
            futures = self.waiting.get(job_id, [])
            if future in futures:
                futures.remove(future)
                if not futures:
                    del self.waiting[job_id]

    async def _loop(self) -> None:
        from airflow_gpu.hooks.batch import GPUBatchHook

        hook = GPUBatchHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        while self.waiting:
            await asyncio.sleep(self.interval)
            batch = {job_id: futures for job_id, futures in self.waiting.items() if futures}
            if not batch:
                continue
            ids = list(batch)
            try:
                found = await asyncio.to_thread(hook.describe_jobs_batched, ids)
            except Exception as error:  # every waiter hears about it; each decides to retry or fail
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(error)
                continue
            for job_id, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(found.get(job_id))
        SharedJobPoller._pollers.pop(self.key, None)


class GPUBatchJobTrigger(BaseTrigger):
    """Fires ``{"status": "done" | "capacity_timeout" | "error", "job_id": ...}`` for one Batch job."""

    def __init__(
        self,
        job_id: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_interval: float = 30,
        capacity_timeout: float | None = None,
        max_errors: int = 5,
        deferred_at: float | None = None,
    ) -> None:
        super().__init__()
        self.deferred_at = deferred_at  # epoch seconds; no event before RESUME_DWELL_SECONDS after it
        self.job_id, self.aws_conn_id, self.region_name = job_id, aws_conn_id, region_name
        self.poll_interval, self.capacity_timeout, self.max_errors = poll_interval, capacity_timeout, max_errors

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poll_interval": self.poll_interval,
                "capacity_timeout": self.capacity_timeout,
                "max_errors": self.max_errors,
                "deferred_at": self.deferred_at,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for event in self._events():
            await dwell(self.deferred_at)  # apache/airflow#72716: see resume_dwell
            yield event
            return

    async def _events(self) -> AsyncIterator[TriggerEvent]:
        poller = SharedJobPoller.get(self.aws_conn_id, self.region_name, float(self.poll_interval))
        clock = CapacityClock(self.capacity_timeout) if self.capacity_timeout is not None else None
        errors = missing = 0
        while True:
            try:
                job = await poller.next_description(self.job_id)
            except Exception as error:
                errors += 1
                if errors >= self.max_errors:
                    yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(error)})
                    return
                continue
            errors = 0
            if job is None:
                missing += 1
                if missing >= MISSING_ROUNDS:
                    message = f"Batch did not return the job in {missing} DescribeJobs calls"
                    yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": message})
                    return
                continue
            missing = 0
            if job["status"] in FINAL:
                yield TriggerEvent({"status": "done", "job_id": self.job_id, "job_status": job["status"]})
                return
            if clock is not None and clock.expired(job["status"], time.monotonic()):
                yield TriggerEvent(
                    {"status": "capacity_timeout", "job_id": self.job_id, "reason": job.get("statusReason")}
                )
                return

    async def on_kill(self) -> None:
        """ "Mark Failed" on a deferred task (Airflow 3.3+): terminate the job, or it runs on, billed.

        Building the client reads the connection and credentials: all of it runs in a thread, so the
        triggerer's event loop, shared by every deferred task, never blocks on it.
        """
        try:
            await asyncio.to_thread(partial(self._terminate, KILLED[0]))
            self.log.info("Terminated AWS Batch job %s", self.job_id)
        except Exception:
            self.log.exception("Could not terminate AWS Batch job %s", self.job_id)

    def _terminate(self, reason: str) -> None:
        from airflow_gpu.hooks.batch import GPUBatchHook

        GPUBatchHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).api.terminate_job(
            jobId=self.job_id, reason=reason
        )

"""``GPUBatchJobTrigger``: wait for Batch jobs with one DescribeJobs call per 100 jobs, not per job.

The official ``BatchJobTrigger`` runs a waiter per task: 300 deferred shards make 300 DescribeJobs calls every
interval, and Batch throttles DescribeJobs per account. Here every trigger of the same connection, region and
interval in a triggerer process registers its job with one ``SharedJobPoller``, which asks for up to 100 ids per
call and hands each trigger its job. The trigger fires when the job ends, or when it has waited RUNNABLE for longer
than ``capacity_timeout`` (the operator then cancels it and, if it did not start meanwhile, moves on). DescribeJobs
is retried with backoff when Batch throttles it (``GPUBatchHook``), and a job missing from a few answers
(DescribeJobs is eventually consistent) is asked for again before giving up.

The poller's hook is built again every ``HOOK_TTL`` seconds and after any failed round, so rotated keys or an edited
connection reach a triggerer that never goes idle; a round that cannot build one fails that round's waiters, who
retry or give up as for a DescribeJobs error. A trigger that cancels a job past ``capacity_timeout`` waits for the
cancel through the same poller, not with a thread of its own. Mark Failed (``on_kill``) is ``BatchKill``'s; a
multi-node job whose child node failed is stopped at the poll that sees it (``hooks.batch_nodes``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu.hooks import batch_nodes, batch_submit
from airflow_gpu.hooks.batch_submit import Submitted
from airflow_gpu.spot.batch import FINAL, CapacityClock, capacity_cancel_reason, child_node_ids
from airflow_gpu.triggers.batch_kill import BatchKill
from airflow_gpu.triggers.batch_resubmission import DUPLICATE_REASON, BatchResubmission
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.triggers.resume_dwell import dwell

#: Polling rounds a job may be missing from DescribeJobs before the trigger gives up on it.
MISSING_ROUNDS = 5
#: TerminateJob's reasons for a job of the try that a follower stopped as a duplicate (``batch_submit``).
DUPLICATE_REASONS = frozenset({DUPLICATE_REASON, batch_submit.DUPLICATE_REASON})
#: Failed look-ups of the kept job, after a followed job was stopped as a duplicate, before its end is reported.
KEPT_LOOKUPS = 3
#: Polling rounds after a resubmission in which a racing trigger's duplicate job is looked for.
CONVERGE_ROUNDS = 3
#: Event key carrying the spot run's state to the worker, when the trigger carried the run on.
STATE_KEY = "gpu_state"
#: Seconds a poller's hook (its connection and credentials) serves before it is built again.
HOOK_TTL = 300.0


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
        """Poll while anyone waits; should the loop itself fail, every waiter hears of it (nobody is
        left waiting on a loop that is gone), and the next registrant starts a new one."""
        try:
            await self._poll()
        except BaseException as error:
            for futures in list(self.waiting.values()):
                for future in futures:
                    if not future.done():
                        future.set_exception(error if isinstance(error, Exception) else RuntimeError(repr(error)))
            raise
        finally:
            if SharedJobPoller._pollers.get(self.key) is self and not self.waiting:
                del SharedJobPoller._pollers[self.key]

    async def _poll(self) -> None:
        from airflow_gpu.hooks.batch import GPUBatchHook

        hook: Any = None
        built = 0.0
        while self.waiting:
            await asyncio.sleep(self.interval)
            batch = {job_id: futures for job_id, futures in self.waiting.items() if futures}
            if not batch:
                continue
            ids = list(batch)
            try:
                if hook is None or time.monotonic() - built >= HOOK_TTL:  # rotated keys, an edited connection
                    hook, built = await GPUBatchHook.for_trigger(self.aws_conn_id, self.region_name), time.monotonic()
                found = await asyncio.to_thread(hook.describe_jobs_batched, ids)
            except Exception as error:  # every waiter hears about it; each decides to retry or fail
                hook = None  # expired credentials, say: the next round reads the connection again
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(error)
                continue
            for job_id, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(found.get(job_id))


class GPUBatchJobTrigger(BatchKill, BaseTrigger):
    """Fires ``{"status": "done" | "capacity_timeout" | "error", "job_id": ...}`` for one Batch job.

    With ``gpu_spot`` (the operator's ``batch_deferral.resubmission_plan``) it carries the spot run
    on itself: a reclaimed job, or one RUNNABLE past ``capacity_timeout`` (cancelled here), is
    followed by the next job, submitted from here (``batch_resubmission``), and the event is the
    final job's, with the run's state under ``gpu_state``.
    """

    def __init__(
        self,
        job_id: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_interval: float = 30,
        capacity_timeout: float | None = None,
        max_errors: int = 5,
        deferred_at: float | None = None,
        gpu_spot: dict[str, Any] | None = None,
        log_lag: float | None = None,
        watch_duplicates: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.deferred_at = deferred_at  # epoch seconds; no event before RESUME_DWELL_SECONDS after it
        self.job_id, self.aws_conn_id, self.region_name = job_id, aws_conn_id, region_name
        self.poll_interval, self.capacity_timeout, self.max_errors = poll_interval, capacity_timeout, max_errors
        self.gpu_spot = gpu_spot
        #: With a number: an interrupted job's log is printed into the trigger log that long after it ended.
        self.log_lag = log_lag
        #: The queue and name of a job the worker sent again after a lost answer (``batch_submit``): a first
        #: job of the try listed late is looked for, and one of the two terminated.
        self.watch_duplicates = watch_duplicates
        self._converge_rounds = 0  # polling rounds left in which a racing trigger's duplicate is looked for
        self._duplicate_reason = DUPLICATE_REASON  # TerminateJob's for a duplicate ``_converge`` stops: the cause
        self._killed = threading.Event()  # set by the kill; read by the SubmitJob thread (``batch_submit``)
        self._printing: list[asyncio.Task[None]] = []

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
                "gpu_spot": self.gpu_spot,
                "log_lag": self.log_lag,
                "watch_duplicates": self.watch_duplicates,
            },
        )

    async def _hook(self) -> Any:
        """The Batch hook for calls in a thread, its connection read here in the loop (``for_trigger``)."""
        from airflow_gpu.hooks.batch import GPUBatchHook

        return await GPUBatchHook.for_trigger(self.aws_conn_id, self.region_name)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        resubmission = BatchResubmission.from_argument(self.gpu_spot) if self.gpu_spot is not None else None
        self._resubmission = resubmission  # its run follows the job followed (``_converge``, ``_follow_kept``)
        if resubmission is not None and self.watch_duplicates:
            queue, name = self.watch_duplicates
            self._submitted = (queue, name)
            self._converge_rounds = batch_submit.watch_rounds(float(self.poll_interval))
            self._duplicate_reason = batch_submit.DUPLICATE_REASON  # the worker's first job, listed late
        try:
            while True:
                payload: dict[str, Any] = {}
                async for event in self._events(resubmission is not None):
                    payload = dict(event.payload)
                if resubmission is not None and payload.get("status") == "done":
                    before, ended = resubmission.run.to_json(), payload.pop("job")
                    try:
                        if await self._resubmitted(resubmission, ended):
                            continue
                    except Exception as error:  # the worker submits it: the run goes on, one round trip more
                        self.log.exception("Could not submit the job after %s; the task resumes to do it", self.job_id)
                        resubmission.run.restore(before)
                        self.job_id = payload["job_id"] = str(ended["jobId"])
                        payload["message"] = f"the trigger could not submit the next job: {error}"
                if resubmission is not None:  # every event: an error after a resubmission keeps its record
                    payload[STATE_KEY] = resubmission.run.to_json()
                payload.pop("job", None)
                await asyncio.gather(*self._printing)  # the interrupted jobs' logs, before the task resumes
                await dwell(self.deferred_at)  # apache/airflow#72716: see resume_dwell
                yield TriggerEvent(payload)
                return
        finally:
            for printing in self._printing:
                printing.cancel()

    async def _events(self, carry_on: bool) -> AsyncIterator[TriggerEvent]:
        """The current job's end; carrying the run on, a capacity timeout cancels the job here."""
        poller = SharedJobPoller.get(self.aws_conn_id, self.region_name, float(self.poll_interval))
        clock = CapacityClock(self.capacity_timeout) if self.capacity_timeout is not None else None
        errors = missing = lookups = 0
        while True:
            try:
                if self._converge_rounds > 0:
                    self._converge_rounds -= 1
                    await asyncio.to_thread(self._converge, await self._hook())
                job = await poller.next_description(self.job_id)
                if job is not None and job["status"] == "RUNNING" and child_node_ids(job):  # no training without a node
                    await asyncio.to_thread(batch_nodes.stop_if_a_node_failed, await self._hook(), job)
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
                try:  # stopped as a duplicate by a twin that saw the try's first job: that one is the try's
                    if await self._follow_kept(job):
                        continue
                except Exception as error:
                    lookups += 1
                    self.log.warning("Could not look up the job kept in place of %s (%s)", self.job_id, error)
                    if lookups < KEPT_LOOKUPS:
                        continue
                yield TriggerEvent({"status": "done", "job_id": self.job_id, "job_status": job["status"], "job": job})
                return
            if clock is not None and clock.expired(job["status"], time.monotonic()):
                if carry_on:
                    try:
                        job = await self._cancel_for_capacity(poller, job)
                    except Exception as error:  # throttled, or a 5xx: the job is still ours to follow
                        errors += 1
                        if errors >= self.max_errors:
                            yield TriggerEvent({"status": "error", "job_id": self.job_id, "message": str(error)})
                            return
                        continue
                    if job["status"] in FINAL:
                        yield TriggerEvent(
                            {"status": "done", "job_id": self.job_id, "job_status": job["status"], "job": job}
                        )
                        return
                    continue  # it started meanwhile: follow it
                yield TriggerEvent(
                    {"status": "capacity_timeout", "job_id": self.job_id, "reason": job.get("statusReason")}
                )
                return

    # --- carrying the spot run on ---------------------------------------------------------

    async def _resubmitted(self, resubmission: BatchResubmission, job: dict[str, Any]) -> bool:
        """True when the job's end was an interruption the policy rides out here, and the next job exists."""
        decided = resubmission.decide(job)
        if decided is None:
            return False
        _, decision = decided
        ended = str(job["jobId"])
        log_interruptions(self.log, resubmission.run, decision, ended)
        if (chosen := resubmission.move_to_offered()) is not None:  # as the worker's submit_job would
            self.log.warning(
                "%s (%s capacity) is not offered by its queue; using %s (%s capacity)",
                resubmission.run.candidates[chosen.candidate], chosen.capacity or "any", resubmission.run.accelerator,
                resubmission.run.capacity,
            )  # fmt: skip
        args = resubmission.submission(resubmission.next_name())
        hook = await self._hook()
        # Not cancelled with the trigger (a thread cannot be): ``on_kill`` waits for it within its budget, and
        # the thread, told of the kill (``_killed``), sends nothing more and stops a job created after it.
        self._submitting_as = (str(args["jobQueue"]), str(args["jobName"]))
        self._submitting = asyncio.ensure_future(asyncio.to_thread(self._submit_once, hook, resubmission, args))
        submitted = await asyncio.shield(self._submitting)
        self.job_id, adopted = submitted.job_id, submitted.adopted
        resubmission.run.submitted(self.job_id)
        rounds = batch_submit.watch_rounds(float(self.poll_interval)) if submitted.resent else 0
        self._converge_rounds = max(CONVERGE_ROUNDS, rounds)
        self._duplicate_reason = batch_submit.DUPLICATE_REASON if submitted.resent else DUPLICATE_REASON
        self.log.info(
            "%s job %s (%s) on %s (%s capacity) in queue %s, in place of %s",
            "Following the existing" if adopted else "Submitted", args["jobName"], self.job_id,
            resubmission.run.accelerator, resubmission.run.capacity, args["jobQueue"], ended,
        )  # fmt: skip
        self._resubmission, self._submitted = resubmission, (args["jobQueue"], args["jobName"])
        if self.log_lag is not None:
            self._printing.append(asyncio.create_task(self._print_log(job, self.log_lag)))
        return True

    _resubmission: BatchResubmission | None = None
    _submitted: tuple[str, str] | None = None  # the queue and name of the last job submitted here

    def _submit_once(self, hook: Any, resubmission: BatchResubmission, args: dict[str, Any]) -> Submitted:
        """The job of this name and task try: the one already submitted (a replay), else a new one; none
        once the trigger was killed, and a job found or created then terminated (``batch_submit.Withdrawn``)."""
        kept = resubmission.keep(hook.jobs_named(args["jobQueue"], args["jobName"]))
        if kept is not None:
            if self._killed.is_set():
                batch_submit.withdraw(hook, args, str(kept["jobId"]), self.log)
            return Submitted(str(kept["jobId"]), adopted=True)
        return hook.submit_job_once(args, resubmission.keep, self._killed.is_set, self.log)  # type: ignore[no-any-return]

    def _converge(self, hook: Any) -> None:
        """A trigger racing this one (apache/airflow#37180), or a first submission listed late (``batch_submit``),
        may have made a second job of the name: every follower keeps the oldest of this task try's jobs, and
        the others are terminated with a log line."""
        resubmission, submitted = self._resubmission, self._submitted
        if resubmission is None or submitted is None:
            return
        kept = batch_submit.stop_duplicates(
            hook, *submitted, resubmission.keep, resubmission.same_task_try, FINAL, self._duplicate_reason
        )
        if kept is not None and kept != self.job_id:
            self.log.warning("Following job %s, submitted first, instead of %s", kept, self.job_id)
            self.job_id = kept
            resubmission.run.submitted(self.job_id)

    async def _follow_kept(self, job: dict[str, Any]) -> bool:
        """True when ``job`` ended because a follower of this task try terminated it as a duplicate (a twin
        trigger, apache/airflow#37180, whose ListJobs already showed the try's first job), and the job it
        kept is followed now. Its end is not the task's: reported, it failed the task while the kept job
        ran on with nobody following it."""
        resubmission = self._resubmission
        if resubmission is None or (job.get("statusReason") or "") not in DUPLICATE_REASONS:
            return False
        hook = await self._hook()
        jobs = await asyncio.to_thread(hook.jobs_named, str(job["jobQueue"]), str(job["jobName"]))
        kept = resubmission.keep(jobs)
        if kept is None or kept["jobId"] == job["jobId"]:
            return False
        self.log.warning(
            "Job %s was terminated as a duplicate of this task try's job %s, created first: following that one",
            job["jobId"], kept["jobId"],
        )  # fmt: skip
        self.job_id = str(kept["jobId"])
        resubmission.run.submitted(self.job_id)
        return True

    async def _cancel_for_capacity(self, poller: SharedJobPoller, job: dict[str, Any]) -> dict[str, Any]:
        """CancelJob, then the job once it left RUNNABLE, seen through the shared poller (no thread
        sleeps through the wait: thousands of jobs may time out together). Still RUNNABLE after
        ``CANCEL_TIMEOUT``, it is terminated (``GPUBatchHook.stop_uncancelled``) before the run
        moves on, so that it cannot start later with nobody following it."""
        from airflow_gpu.hooks import batch as batch_hook

        reason = capacity_cancel_reason(job, float(self.capacity_timeout or 0))
        job_id, hook = str(job["jobId"]), await self._hook()
        self.log.warning("Cancelling job %s: %s", job_id, reason)
        await asyncio.to_thread(hook.cancel, job_id, reason)
        deadline = time.monotonic() + batch_hook.CANCEL_TIMEOUT
        current = job
        while True:
            seen = await poller.next_description(job_id)
            current = seen or current
            if seen is not None and seen["status"] != "RUNNABLE":
                return seen
            if time.monotonic() >= deadline:
                return dict(await asyncio.to_thread(hook.stop_uncancelled, current, reason))

    async def _print_log(self, job: dict[str, Any], lag: float) -> None:
        """What an interrupted job printed (its last checkpoint, the SIGTERM) into the task's trigger log,
        once CloudWatch has had ``lag`` seconds to take its last lines in."""
        await asyncio.sleep(lag)
        try:
            hook = await self._hook()
            lines = await asyncio.to_thread(hook.attempt_lines, job)
        except Exception as error:  # the run goes on without it
            self.log.info("The log of job %s could not be read (%s: %s)", job["jobId"], type(error).__name__, error)
            return
        for line in lines:
            if line.strip() and not line.startswith("::airflow-gpu-"):  # result, profile: from the last job
                self.log.info("[%s] %s", job["jobId"], line)

"""Mark Failed on a deferred ``GPUBatchJobTrigger``: every job of the task try terminated, within the budget.

A mixin of the trigger (``triggers.batch``), as ``pod_carry_on`` is of the pod trigger: the kill is
``kill_tasks``'s owned, bounded task; here is what it stops. The job the trigger follows, the job of
a SubmitJob still on its way in a thread, and, carrying a spot run, every job of this try not yet
ended (a replacement a twin trigger submitted). Each job is tried even when an earlier one could not
be stopped, and the ERROR of ``kill_tasks`` names those left running.

A thread cannot be cancelled, and its SubmitJob (a minute of look-ups after a lost answer, a resend)
is not bounded by the kill's budget: the kill waits for it within the budget, and tells it of the
kill (``_killed``), so that it sends no further SubmitJob and terminates a job whose SubmitJob
answers afterwards itself (``batch_submit.Withdrawn``). While it is in flight, the job the trigger
names has ended (its end is why the next is submitted): the ERROR names the submission, by its job
name and queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow_gpu.hooks.batch_submit import Withdrawn
from airflow_gpu.spot.batch import KILLED
from airflow_gpu.triggers import kill_guard, kill_tasks
from airflow_gpu.triggers.batch_resubmission import carried_queues, live_jobs

if TYPE_CHECKING:
    from airflow_gpu.hooks.batch_submit import Submitted


class BatchKill:
    """``on_kill`` of ``GPUBatchJobTrigger`` (the fields below are the trigger's)."""

    job_id: str
    gpu_spot: dict[str, Any] | None
    log: Any
    _submitting: asyncio.Future[Submitted] | None = None  # the SubmitJob in flight, or the last one
    _submitting_as: tuple[str, str] | None = None  # the queue and name of that SubmitJob's job
    _killed: threading.Event  # set by the kill: the SubmitJob thread stops (``batch_submit``)

    _hook: Callable[[], Awaitable[Any]]  # the trigger's own method: the hook built for its connection

    async def on_kill(self) -> None:
        """ "Mark Failed" on a deferred task (Airflow 3.3+): terminate the job, or it runs on, billed.

        It is the job this trigger follows now (a replacement it submitted, maybe). Airflow cancels
        the trigger first, but a SubmitJob already on its way runs on in its thread: it is told of
        the kill and waited for, and its job terminated too (by the thread, if SubmitJob answers after
        the kill: see the module's docstring). Building the client reads credentials: all of it runs in
        a thread, so the triggerer's event loop, shared by every deferred task, never blocks on it.
        """
        # Owned and bounded (``kill_tasks``): the trigger runner cancels a removed trigger again at every turn
        # of its loop, and ``run_trigger`` swallows the cancel that reaches ``on_kill``: the kill runs on as
        # a task of its own, its TerminateJobs retried within ``[triggerer] on_kill_timeout``.
        await kill_tasks.run(f"Stopping the AWS Batch jobs of trigger for {self.job_id}", self.log, self._kill)

    async def _kill(self, kill: kill_tasks.Kill) -> None:
        if await kill_guard.handed_over(self):  # moved to another triggerer, which follows the job
            return
        self._killed.set()  # before the wait below: a SubmitJob in flight sends nothing more
        job_ids: list[str] = []
        stopped: list[str] = []  # by the SubmitJob thread itself
        submitting, in_flight = self._submitting, None
        if submitting is not None and not submitting.done() and self._submitting_as is not None:
            in_flight = _submission(*self._submitting_as)  # the job followed has ended: this may run
            kill.aim(in_flight)
        else:
            job_ids.append(self.job_id)
            kill.aim(_job(self.job_id))
        if submitting is not None:
            try:
                submitted = await asyncio.shield(submitting)
            except Withdrawn as withdrawn:  # told of the kill: it sent nothing more, or stopped its job
                if withdrawn.job_id is not None:
                    kill.aim(_job(withdrawn.job_id))
                    (stopped if withdrawn.terminated else job_ids).append(withdrawn.job_id)
            except Exception:  # SubmitJob failed: nothing of it to stop; the name lookup below looks anyway
                self.log.info("The replacement being submitted when the task was killed was not submitted")
            else:
                job_ids.append(submitted.job_id)
                kill.aim(_job(submitted.job_id))
            if in_flight is not None:
                kill.stopped(in_flight)  # named by its id from here on
        for job_id in stopped:
            kill.stopped(_job(job_id))
        try:
            hook = await self._hook()
            await asyncio.to_thread(self._terminate_all, hook, list(dict.fromkeys(job_ids)), kill, stopped)
        except Exception:
            self.log.exception("Could not terminate AWS Batch job %s", self.job_id)

    def _terminate_all(self, hook: Any, job_ids: list[str], kill: kill_tasks.Kill, stopped: list[str]) -> None:
        """TerminateJob on ``job_ids`` and, carrying a spot run, on every job of this try not yet ended
        (a replacement submitted while the kill came in) but those ``stopped`` already: in a thread, the
        client built there too. Each job is tried even when an earlier one could not be stopped; ``kill``
        names what was not."""
        for job_id in job_ids:
            self._terminate(hook, job_id, kill)
        if self.gpu_spot is None:
            return
        spot = self.gpu_spot
        for job in live_jobs(hook, carried_queues(spot), spot["first_name"], spot["identity"]):
            if job["jobId"] not in job_ids and job["jobId"] not in stopped:
                kill.aim(_job(str(job["jobId"])))
                self._terminate(hook, str(job["jobId"]), kill)

    def _terminate(self, hook: Any, job_id: str, kill: kill_tasks.Kill) -> None:
        try:
            hook.terminate(job_id, KILLED[0])
        except Exception as error:
            self.log.warning("Could not terminate AWS Batch job %s (%s: %s)", job_id, type(error).__name__, error)
            return
        kill.stopped(_job(job_id))
        self.log.info("Terminated AWS Batch job %s", job_id)


def _job(job_id: str) -> str:
    return f"AWS Batch job {job_id}"


def _submission(queue: str, name: str) -> str:
    return (
        f"AWS Batch job {name} in queue {queue} (SubmitJob in flight: its thread terminates the job when Batch answers)"
    )

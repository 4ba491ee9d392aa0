"""Mark Failed on a deferred ``GPUBatchJobTrigger``: every job of the task try terminated, within the budget.

A mixin of the trigger (``triggers.batch``), as ``pod_carry_on`` is of the pod trigger: the kill is
``kill_tasks``'s owned, bounded task; here is what it stops. The job the trigger follows, the job of
a SubmitJob still on its way in a thread (waited for: a thread cannot be cancelled), and, carrying a
spot run, every job of this try not yet ended (a replacement a twin trigger submitted). Each job is
tried even when an earlier one could not be stopped, and the ERROR of ``kill_tasks`` names those
left running.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

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

    async def _hook(self) -> Any:  # pragma: no cover - the trigger's
        raise NotImplementedError

    async def on_kill(self) -> None:
        """ "Mark Failed" on a deferred task (Airflow 3.3+): terminate the job, or it runs on, billed.

        It is the job this trigger follows now (a replacement it submitted, maybe). Airflow cancels
        the trigger first, but a SubmitJob already on its way runs on in its thread: it is waited
        for, and its job terminated too. Building the client reads credentials: all of it runs in
        a thread, so the triggerer's event loop, shared by every deferred task, never blocks on it.
        """
        # Owned and bounded (``kill_tasks``): the trigger runner cancels a removed trigger again at every turn
        # of its loop, and ``run_trigger`` swallows the cancel that reaches ``on_kill``: the kill runs on as
        # a task of its own, its TerminateJobs retried within ``[triggerer] on_kill_timeout``.
        await kill_tasks.run(f"Stopping the AWS Batch jobs of trigger for {self.job_id}", self.log, self._kill)

    async def _kill(self, kill: kill_tasks.Kill) -> None:
        if await kill_guard.handed_over(self):  # moved to another triggerer, which follows the job
            return
        job_ids = [self.job_id]
        kill.aim(_job(self.job_id))
        if self._submitting is not None:
            try:
                job_ids.append((await asyncio.shield(self._submitting)).job_id)
                kill.aim(_job(job_ids[-1]))
            except Exception:  # SubmitJob failed: nothing of it to stop; the name lookup below looks anyway
                self.log.info("The replacement being submitted when the task was killed was not submitted")
        try:
            hook = await self._hook()
            await asyncio.to_thread(self._terminate_all, hook, list(dict.fromkeys(job_ids)), kill)
        except Exception:
            self.log.exception("Could not terminate AWS Batch job %s", self.job_id)

    def _terminate_all(self, hook: Any, job_ids: list[str], kill: kill_tasks.Kill) -> None:
        """TerminateJob on ``job_ids`` and, carrying a spot run, on every job of this try not yet ended
        (a replacement submitted while the kill came in): in a thread, the client built there too. Each
        job is tried even when an earlier one could not be stopped; ``kill`` names what was not."""
        for job_id in job_ids:
            self._terminate(hook, job_id, kill)
        if self.gpu_spot is None:
            return
        spot = self.gpu_spot
        for job in live_jobs(hook, carried_queues(spot), spot["first_name"], spot["identity"]):
            if job["jobId"] not in job_ids:
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

"""Mark Failed on a deferred ``GPUTrainingJobTrigger``: every training Job and Service of the try deleted, within
the budget, except one that has ended or that the trigger's other copy handed to the worker.

A mixin of the trigger (``triggers.training_job``), as ``batch_kill`` is of the Batch trigger: the kill
is ``kill_tasks``'s owned, bounded task; here is what it stops. A trigger moved to another triggerer
stops nothing (``kill_guard``); a Job its controller has judged, or one handed back, is left to the
task that reads or follows it (``kill_spare``). A Job is deleted in the foreground (its pods with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_gpu.spot.training_job import judged
from airflow_gpu.triggers import cluster, kill_guard, kill_spare, kill_tasks


class TrainingJobKill:
    """``on_kill`` and ``cleanup`` of ``GPUTrainingJobTrigger`` (the fields below are the trigger's)."""

    namespace: str
    current: str
    log: Any
    _fired: bool
    if TYPE_CHECKING:  # the trigger's cached property; declared for the type checker only

        @property
        def connection(self) -> cluster.ClusterConnection: ...

    _objects: Callable[[], Awaitable[list[dict[str, Any]]]]  # this try's Jobs and Services, as listed

    async def on_kill(self) -> None:
        """Mark Failed on the deferred task (Airflow 3.3+): the training must not run on, billed."""
        # Owned and bounded (``kill_tasks``): the trigger runner cancels a removed trigger again at every
        # turn of its loop until its task ends, and ``run_trigger`` swallows the cancel that reaches
        # ``on_kill``: the kill runs on as a task of its own, its deletes retried within the budget.
        await kill_tasks.run(f"Deleting training Job {self.namespace}/{self.current}", self.log, self._kill)

    async def _kill(self, kill: kill_tasks.Kill) -> None:
        if self._fired or await kill_guard.handed_over(self):  # moved to another triggerer: it follows the Job
            return
        names = {self.current}
        kill.aim(*self._refs(self.current))
        listed: dict[tuple[str, str], dict[str, Any]] | None = None
        try:
            found = await self._objects()
            names |= {o["metadata"]["name"] for o in found}
            listed = {(o["kind"], o["metadata"]["name"]): o for o in found}
        except Exception as error:  # the current Job goes in any case
            self.log.warning("Could not list this try's training Jobs (%s)", error)
        # All at once, the current Job first: each delete may be throttled and retried (429 with Retry-After),
        # and one at a time they could outlast ``[triggerer] on_kill_timeout`` before the running Job, the
        # billed one, is reached.
        ordered = [self.current, *sorted(names - {self.current})]
        for name in ordered:
            kill.aim(*self._refs(name))
        await asyncio.gather(*(self._delete_run(name, listed, kill) for name in ordered))

    async def _delete_run(
        self, name: str, listed: dict[tuple[str, str], dict[str, Any]] | None, kill: kill_tasks.Kill
    ) -> None:
        """Delete the Job and its Service (as just listed, else read here) unless the Job controller has judged
        the Job or this trigger's other copy handed it to the worker (the mark on its Service: ``kill_spare``)."""
        job, service = (listed or {}).get(("Job", name)), (listed or {}).get(("Service", name))
        if listed is None or job is None:
            job = await kill_spare.read(self, "jobs", self.namespace, name)
        if listed is None:
            service = await kill_spare.read(self, "services", self.namespace, name)
        what = f"Training Job {self.namespace}/{name} (and its Service)"
        if kill_spare.spared(self, kill, what, self._refs(name), service, bool(job) and judged(job)):
            return
        self.log.info("Deleting training Job %s/%s and its Service", self.namespace, name)
        await asyncio.gather(*(self._delete_object(kind, name, kill) for kind in ("jobs", "services")))

    def _refs(self, name: str) -> tuple[str, str]:
        return f"training Job {self.namespace}/{name}", f"Service {self.namespace}/{name}"

    async def _delete_object(self, plural: str, name: str, kill: kill_tasks.Kill) -> None:
        options = {"propagation_policy": "Foreground"} if plural == "jobs" else {}
        try:
            await cluster.delete(self.connection, plural, self.namespace, name, **options)
        except Exception:
            self.log.exception("Could not delete %s %s", plural[:-1], name)
            return
        kill.stopped(self._refs(name)[0 if plural == "jobs" else 1])

    async def cleanup(self) -> None:
        """Before Airflow 3.3 the triggerer calls only this, also on a restart: the Job goes only when the
        task is no longer deferred (killed by a person), as the official trigger decides for its pod."""
        if AIRFLOW_V_3_3_PLUS or self._fired:
            return
        # Owned and bounded (``kill_tasks``): Airflow 3.2's runner cancels the trigger again at every turn of
        # its loop until its task ends (see GPUPodTrigger.cleanup).
        await kill_tasks.run(f"Cleaning up training Job {self.namespace}/{self.current}", self.log, self._after_cancel)

    async def _after_cancel(self, kill: kill_tasks.Kill) -> None:
        deferred = await kill_guard.still_deferred(self)  # in the loop: see kill_guard.still_deferred
        if deferred is None:
            self.log.warning("Could not tell the task's state; the training Job is left running")
        elif not deferred:
            await self._kill(kill)

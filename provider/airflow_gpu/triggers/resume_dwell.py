"""A GPU trigger does not fire in the first seconds after its deferral (apache/airflow#72716).

In Airflow 3.3.2 a task that defers and is resumed at once can be failed by the scheduler: the
worker that ran ``defer()`` exits, and its executor event (success) is drained only after the
resumed attempt is already QUEUED or RUNNING, which the scheduler takes for a task killed from
outside (the fix, apache/airflow#72767, is not released). The window is the time the executor
takes to report that exit: seconds on a busy machine. A GPU task that ends within seconds of its
deferral is rare in production and frequent in tests and in mapped fan-outs of short shards, so
the provider's triggers hold an event until ``RESUME_DWELL_SECONDS`` after the deferral: a task
that ran for hours loses nothing, one that ended at once waits a few seconds more, and neither is
failed by the race. Remove once the pinned Airflow carries the fix.

The window is how long the scheduler takes to drain the executor's events: about a second on a
healthy scheduler, 18 s seen on a 2-core machine running forty-odd tasks at once. ``[gpu]
resume_dwell_seconds`` (``AIRFLOW__GPU__RESUME_DWELL_SECONDS``) sets it for the triggerer; 0 turns
the dwell off for an Airflow that has the fix. A trigger run inline by ``dag.test()`` (``airflow dags
test``, a user's CI) does not dwell: no scheduler runs there (``utils.supervision``).
"""

from __future__ import annotations

import asyncio
import time

#: Seconds after a deferral before its trigger may fire, unless ``[gpu] resume_dwell_seconds`` says.
RESUME_DWELL_SECONDS = 10.0


def dwell_seconds() -> float:
    """``[gpu] resume_dwell_seconds`` of the triggerer's configuration, else ``RESUME_DWELL_SECONDS``."""
    from airflow.providers.common.compat.sdk import conf

    return max(0.0, float(conf.getfloat("gpu", "resume_dwell_seconds", fallback=RESUME_DWELL_SECONDS)))


async def dwell(deferred_at: float | None) -> None:
    """Wait until ``dwell_seconds()`` after ``deferred_at`` (epoch seconds; None: not at all). Not in a run in
    process (``dag.test()``, ``airflow dags test``: the trigger runs inline, and no scheduler races it), where
    it only made every deferred task of a user's CI test 10 s longer."""
    from airflow_gpu.utils.supervision import in_process

    if deferred_at is None or in_process():
        return
    wait = deferred_at + dwell_seconds() - time.time()
    if wait > 0:
        await asyncio.sleep(wait)

"""Requests to the triggerer's supervisor that a cancel cannot cut in half (Airflow 3.2).

In a triggerer every trigger shares one channel to the supervisor process: a connection read
(``aget_connection``), a task's state (``GetTaskStates``). In Airflow 3.2.0
(``airflow/jobs/triggerer_job_runner.py``, ``TriggerCommsDecoder.asend``) a request writes its frame
and then reads the next frame off the channel as its answer, both under one lock::

    async with self._async_lock:
        self._async_writer.write(bytes)
        return await self._aget_response(frame.id)

A request cancelled between the two lets go of the lock with its answer still unread on the
channel. Cancels come often: the runner cancels a removed trigger wherever it waits, again at every
turn of its loop (``cancel_triggers``); an ``asyncio.wait_for`` that bounds a read cancels it; a
trigger cancels the task that waits on a watch. The next request, often the runner's own
``sync_state_to_supervisor``, then reads the stale answer, ``_aget_response`` raises "Response read
out of order!", and the trigger runner process dies with every trigger in it (seen in the floor
end-to-end run: a state read timed out, the runner died, every later deferred task hung). Airflow
3.3 reads the channel in one reader task that hands each answer to its request's future, so a cancel
there only drops the answer.

So every request our code makes on that channel goes through ``request``: it runs as a task of its
own, awaited through ``asyncio.shield``. A cancel or a timeout ends our wait at once; the request
goes on to read its own answer under the lock, and the channel stays in order. A supervisor that
never answers keeps the lock then, as it would for any request, the runner's own included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Requests still reading their answer: the loop keeps only weak references to tasks, and nobody
#: else holds one whose waiter was cancelled.
_IN_FLIGHT: set[asyncio.Task[Any]] = set()


async def request(call: Coroutine[Any, Any, T]) -> T:
    """``await call``, which asks the supervisor, such that cancelling this wait never cuts it short.

    ``call`` is a coroutine that makes the request (``comms.asend(...)``, ``aget_connection(...)``).
    A cancel (or an enclosing timeout) raises here at once; the request itself runs on until its
    answer is read, and its result or error is then dropped.
    """
    task = asyncio.ensure_future(call)
    _IN_FLIGHT.add(task)
    task.add_done_callback(_finished)
    return await asyncio.shield(task)


async def ask(message: Any) -> Any:
    """Send ``message`` to the supervisor (``SUPERVISOR_COMMS.asend``) through ``request``."""
    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        raise RuntimeError("no supervisor to ask (not in a triggerer)")
    return await request(comms.asend(message))


def _finished(task: asyncio.Task[Any]) -> None:
    """Let the request go; an error nobody waits for any more is logged here, not as "never retrieved"."""
    _IN_FLIGHT.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.debug("A supervisor request ended in %s: %s", type(error).__name__, error)

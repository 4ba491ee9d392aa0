"""What the "a kill refused for good gives up within the triggerer's budget" tests share.

The triggerer cancels a trigger, waits ``[triggerer] on_kill_timeout`` for its ``on_kill`` and then gives
up on it (``run_trigger``). A kill that went on retrying after that (the minutes ``api_retry`` and
botocore give other calls) ran unowned, asking the API long after its task was over. The tests refuse
every call of the kill, play the triggerer's part here, and count the refused calls when the runner
gives up and again a few seconds later: the same count when the kill stopped asking.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

#: ``[triggerer] on_kill_timeout`` in these tests, seconds (30 by default): set it with ``str(ON_KILL_BUDGET)``.
ON_KILL_BUDGET = 4


async def refused_when_given_up_and_later(
    run: Coroutine[Any, Any, Any],
    on_kill: Callable[[], Awaitable[Any]],
    refused: Callable[[], int],
    *,
    runs_for: float = 0.0,
    wait_for_the_cancel: bool = False,
    watch: float = 3.0,
) -> tuple[int, int]:
    """Run the trigger (``run``) for ``runs_for`` seconds, cancel it (waiting for it to end if
    ``wait_for_the_cancel``), give its ``on_kill`` ``ON_KILL_BUDGET`` seconds as the runner does, and
    return ``refused()`` just after the runner gave up and ``watch`` seconds later."""
    task = asyncio.create_task(run)
    if runs_for:
        await asyncio.sleep(runs_for)
    task.cancel()  # as the triggerer does, before it calls on_kill within its budget
    if wait_for_the_cancel:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    with contextlib.suppress(asyncio.TimeoutError):  # as run_trigger: it gives up after the budget
        await asyncio.wait_for(on_kill(), ON_KILL_BUDGET)
    await asyncio.sleep(0.5)
    given_up = refused()
    await asyncio.sleep(watch)  # a kill still retrying would ask again within this
    return given_up, refused()

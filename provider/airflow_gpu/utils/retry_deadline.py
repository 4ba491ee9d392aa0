"""A deadline every retry loop of ours honours while it is set: the kill path's short budget.

A trigger's kill (``on_kill``, the pre-3.3 ``cleanup``) deletes or terminates through the same calls
as the rest of the provider, whose retries ride out 429/5xx for minutes (``api_retry``: 5 minutes;
``batch_retries``: rounds of botocore's attempts). The triggerer waits for ``on_kill`` only
``[triggerer] on_kill_timeout`` seconds (``triggers.kill_tasks``), so a kill's calls must give up
within that, and say what they left running, rather than retry for minutes after the triggerer
gave up on them. ``until`` sets the deadline for the code it wraps: a context variable, so it
reaches the tasks created inside it and the threads started with ``asyncio.to_thread``, and no
other trigger's calls.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("airflow_gpu_retry_deadline", default=None)


@contextlib.contextmanager
def until(seconds: float) -> Iterator[None]:
    """Retries inside stop ``seconds`` from now (a deadline set already, if sooner, stays)."""
    deadline = time.monotonic() + max(float(seconds), 0.0)
    current = _DEADLINE.get()
    token = _DEADLINE.set(deadline if current is None else min(current, deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def left() -> float | None:
    """Seconds left before the deadline (0 past it); None when no deadline is set."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def capped(budget: float) -> float:
    """``budget`` seconds, or what is left before the deadline if that is less."""
    remaining = left()
    return budget if remaining is None else min(budget, remaining)

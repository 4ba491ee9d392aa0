"""Riding out a Kubernetes API server that throttles, restarts or drops a connection, for a long GPU task.

A real API server answers ``429 Too Many Requests`` with ``Retry-After`` under API Priority and
Fairness, ``500``/``502``/``503``/``504`` while it restarts in a control-plane upgrade (which takes
minutes, not seconds), and resets connections; the official clients retry none of it (urllib3 only
re-sends idempotent requests whose connection failed). cncf-kubernetes' ``generic_api_retry`` gives
up after 5 tries (about 15 s) and counts ``409`` as transient, so a create whose response was lost
is re-sent until it gives up on ``AlreadyExists``. Here a call is asked again for as long as a
budget of time lasts (``BUDGET_SECONDS``), waiting what ``Retry-After`` says (on 429 and 503, as
RFC 9110 lets a server say) or an exponential backoff with jitter; ``409`` is the caller's to read
(``adoption``: a create that succeeded unheard is adopted, never made twice). Inside a trigger's
kill the budget is the kill's, seconds (``retry_deadline``). Both clients: the
sync one of KPO's worker and the ``kubernetes_asyncio`` one of the triggers, and our own
``ApiStatusError`` (``triggers.kubernetes_api``), which carries ``retry_after`` itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from airflow_gpu.utils import retry_deadline

#: Statuses worth asking again: throttled (API Priority and Fairness) or a server that failed.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: How long one call is asked again: a control-plane upgrade's 503s last minutes on managed clusters.
BUDGET_SECONDS = 300.0
#: The first backoff and its cap, without ``Retry-After``.
FIRST_WAIT_SECONDS, MAX_WAIT_SECONDS = 1.0, 30.0
#: The longest ``Retry-After`` taken as it is (API Priority and Fairness says 1 s; anything past this is capped).
MAX_RETRY_AFTER_SECONDS = 60.0
LOG = logging.getLogger(__name__)
T = TypeVar("T")


def status_of(error: BaseException) -> int | None:
    """The HTTP status of an API error from either client or ``ApiStatusError``; None for anything else."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def connection_lost(error: BaseException) -> bool:
    """A reset, a refused or timed-out connection: the request may or may not have been served."""
    if isinstance(error, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    from urllib3.exceptions import HTTPError

    if isinstance(error, HTTPError):
        return True
    try:
        from aiohttp import ClientConnectionError, ClientPayloadError
    except ImportError:  # pragma: no cover - aiohttp comes with kubernetes_asyncio
        return False
    return isinstance(error, (ClientConnectionError, ClientPayloadError))


def transient(error: BaseException) -> bool:
    """Whether asking again may succeed: 429, 5xx, or a connection lost on the way."""
    status = status_of(error)
    if status is not None:
        return status in TRANSIENT_STATUSES
    return connection_lost(error)


def retry_after(error: BaseException) -> float | None:
    """The seconds a 429 or 503 asks to wait: its ``Retry-After`` header, else the Status body's
    ``details.retryAfterSeconds`` (which the API server sets with it); None without one."""
    if status_of(error) not in (429, 503):
        return None
    seconds = getattr(error, "retry_after", None)  # ``ApiStatusError`` parsed both already
    if seconds is None:
        headers = getattr(error, "headers", None) or {}
        seconds = headers.get("Retry-After") if hasattr(headers, "get") else None
    if seconds is None:
        try:
            body = json.loads(getattr(error, "body", None) or "{}")
            seconds = (body.get("details") or {}).get("retryAfterSeconds") if isinstance(body, dict) else None
        except (TypeError, ValueError):
            seconds = None
    try:
        return min(max(float(seconds), 0.0), MAX_RETRY_AFTER_SECONDS) if seconds is not None else None
    except (TypeError, ValueError):  # an HTTP date: rare from an API server; back off instead
        return None


class Backoff:
    """The waits of one call: ``Retry-After`` when the server says, else exponential with jitter, until the
    budget is spent (``next_wait`` is None then, or when the error is not transient)."""

    def __init__(self, budget: float | None = None) -> None:
        # Inside a trigger's kill the budget is what its own is left (``retry_deadline``), not minutes.
        self.deadline = time.monotonic() + retry_deadline.capped(BUDGET_SECONDS if budget is None else budget)
        self.attempt = 0

    def next_wait(self, error: BaseException) -> float | None:
        if not transient(error):
            return None
        self.attempt += 1
        asked = retry_after(error)
        wait = asked if asked is not None else min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2 ** (self.attempt - 1))
        wait *= random.uniform(1.0, 1.2)  # never sooner than asked; spread a crowd of clients apart
        if time.monotonic() + wait > self.deadline:
            return None
        return wait


def _say(log: logging.Logger | Any, what: str, error: BaseException, wait: float) -> None:
    status = status_of(error)
    why = f"{status}" if status is not None else f"{type(error).__name__}: {error}"
    log.warning("%s failed (%s); asking again in %.1f s", what, why, wait)


def call(fn: Callable[[], T], what: str, *, budget: float | None = None, log: Any = LOG) -> T:
    """``fn()``, asked again while it fails transiently and the budget lasts (the worker's sync client)."""
    backoff = Backoff(budget)
    while True:
        try:
            return fn()
        except Exception as error:
            wait = backoff.next_wait(error)
            if wait is None:
                raise
            _say(log, what, error, wait)
            time.sleep(wait)


async def acall(fn: Callable[[], Awaitable[T]], what: str, *, budget: float | None = None, log: Any = LOG) -> T:
    """``await fn()``, asked again while it fails transiently and the budget lasts (the triggers' client)."""
    backoff = Backoff(budget)
    while True:
        try:
            return await fn()
        except Exception as error:
            wait = backoff.next_wait(error)
            if wait is None:
                raise
            _say(log, what, error, wait)
            await asyncio.sleep(wait)

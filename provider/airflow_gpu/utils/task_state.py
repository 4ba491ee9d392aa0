"""Reads and writes of Airflow's task state store (3.3+) that ride out a failed request.

The operators keep their run in the store (which job, which pod) so that a retry after a worker
crash finds it. A failed read there used to fail the task before it did anything: the worker
asks the api-server, whose answer may be a 5xx the SDK client gives up on, or, seen under
database contention, a 404 without a JSON body, which the SDK reports as ``API_SERVER_ERROR``
instead of "key not found". A store read is a question the task asks for its own safety; a
transient error is asked again, and a plain "404 Not Found" means the key is not there.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)

#: Tries of one store request, and the pause before the second (doubled after each).
ATTEMPTS, FIRST_PAUSE = 4, 1.0


def _is_not_found(error: Exception) -> bool:
    return "404 Not Found" in str(error)


def _call(what: str, call: Any, *args: Any) -> Any:
    from airflow.sdk.exceptions import AirflowRuntimeError

    pause = FIRST_PAUSE
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call(*args)
        except AirflowRuntimeError as error:
            if what == "read" and _is_not_found(error):
                return None
            if attempt == ATTEMPTS:
                raise
            log.warning("The task state store %s failed (%s); asking again in %.0f s", what, error, pause)
            time.sleep(pause)
            pause *= 2
    return None  # unreachable: the last attempt returns or raises


def read(context: Context, key: str) -> Any:
    """The stored value of ``key``; None when it is not there or there is no store (Airflow < 3.3)."""
    store = context.get("task_state_store")
    return _call("read", store.get, key) if store is not None else None


def write(context: Context, key: str, value: Any) -> bool:
    """Store ``value`` under ``key``; False when there is no store (Airflow < 3.3)."""
    store = context.get("task_state_store")
    if store is None:
        return False
    _call("write", store.set, key, value)
    return True

"""Which AWS errors are transient, how botocore retries them for us, and what we retry on top.

A multi-day GPU job must not fail, nor be lost, because one Batch or CloudWatch Logs call met a
throttle (``TooManyRequestsException`` 429, ``ThrottlingException``), a server fault (500
``ServerException``, 503) or a dropped connection. botocore retries those itself, but its default
("legacy" mode, 5 attempts, about 15 s at most) gives up inside a short burst. Our hooks' clients
use botocore's ``standard`` mode with ``RETRIES["total_max_attempts"]`` attempts (backoff up to 20 s a
pause: about a minute on average, two at most) unless the connection sets ``retries`` in its
``config_kwargs`` extra, which then wins. Past that, ``retry_transient`` tries a call again a few
rounds more, so that a longer outage is waited out (standard mode's retry quota, 500 tokens a
client, can also run out in a long burst and stop botocore's own retries).

SubmitJob is the exception: Batch has no idempotency token for it, so a SubmitJob whose answer
was lost (a connection reset, a read timeout, a 5xx from a front end after the service acted) may
have created the job. Its client retries nothing (``without_retries``); the hook looks the job up
by name and task-try tags before sending it again (``GPUBatchHook.submit_job_once``). Inside a
trigger's kill (``retry_deadline`` set) no round starts past the kill's budget.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.config import Config

from airflow_gpu.utils import retry_deadline

T = TypeVar("T")

#: botocore's retry settings for our clients, when the connection names none.
RETRIES: dict[str, Any] = {"mode": "standard", "total_max_attempts": 10}
#: Rounds of botocore's own attempts a call gets before its transient error is raised.
ROUNDS = 4
#: The longest pause between two rounds, seconds.
MAX_PAUSE = 60.0
#: Error codes of a call the service refused before acting on it (botocore's standard mode list).
THROTTLING_CODES = frozenset(
    {
        "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
        "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
        "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
        "SlowDown", "EC2ThrottledException",
    }
)  # fmt: skip
#: Server faults by code, whatever status a front end put on them.
SERVER_CODES = frozenset(
    {
        "ServerException", "InternalServerError", "InternalServerException", "InternalFailure", "ServiceUnavailable",
        "ServiceUnavailableException", "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    }
)  # fmt: skip
SERVER_STATUSES = frozenset({500, 502, 503, 504})

#: Replaced by tests that must not wait out real pauses.
sleep: Callable[[float], None] = time.sleep


def with_retries(config: Config | None) -> Config:
    """``config`` with botocore's standard retry mode and ``RETRIES`` attempts, unless it sets ``retries``."""
    config = config or Config()
    if getattr(config, "retries", None):
        return config
    return config.merge(Config(retries=dict(RETRIES)))


def without_retries(config: Config | None) -> Config:
    """``config`` whose calls botocore sends once: for SubmitJob, which it must not send twice."""
    return (config or Config()).merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))


def error_code(error: BaseException) -> str | None:
    response = getattr(error, "response", None)
    return (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    status = (response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return int(status) if status else None


def throttled(error: BaseException) -> bool:
    """The service refused the call before acting on it (429, a throttling code), or it never reached it."""
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

    if isinstance(error, EndpointConnectionError | ConnectTimeoutError):
        return True
    return error_code(error) in THROTTLING_CODES or _status(error) == 429


def transient(error: BaseException) -> bool:
    """A throttle, a server fault or a dropped connection: the same call may well succeed later."""
    from botocore.exceptions import ConnectionError as BotocoreConnectionError
    from botocore.exceptions import HTTPClientError

    if isinstance(error, BotocoreConnectionError | HTTPClientError | ConnectionError | TimeoutError):
        return True
    return throttled(error) or error_code(error) in SERVER_CODES or _status(error) in SERVER_STATUSES


def pause(round_: int) -> float:
    """Seconds before round ``round_`` (1-based) of a call: exponential, jittered, at most ``MAX_PAUSE``."""
    return min(MAX_PAUSE, 2.0**round_) * random.uniform(0.5, 1.0)


def retry_transient(what: str, call: Callable[[], T], log: Any, rounds: int = ROUNDS) -> T:
    """``call()``, tried again after a pause while it fails transiently, ``rounds`` times in all; any other
    error, or the last round's, is raised. Each round is botocore's own attempts already."""
    for round_ in range(1, rounds + 1):
        try:
            return call()
        except Exception as error:
            if round_ == rounds or not transient(error):
                raise
            wait, remaining = pause(round_), retry_deadline.left()
            if remaining is not None and wait >= remaining:  # a trigger's kill: its budget is spent
                raise
            log.warning(
                "%s failed transiently (%s: %s); trying again in %.1f s", what, type(error).__name__, error, wait
            )
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover

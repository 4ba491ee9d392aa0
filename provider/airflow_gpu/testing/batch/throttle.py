"""Transient API faults as AWS Batch and CloudWatch Logs answer them: throttles, 5xx, dropped connections.

Batch's request rate limits are low (DescribeJobs especially), and a client is expected to back off
and retry (``BatchClientHook.get_job_description`` does, catching the error code). The real answer
is a REST-JSON error with status 429 and error code ``TooManyRequestsException`` (the SDKs print
"Too Many Requests (Service: AWSBatch; Status Code: 429; Error Code: TooManyRequestsException)");
botocore raises it as a ``ClientError`` with that code. Batch's own server fault is
``ServerException`` (HTTP 500, in every operation's error list); the front end answers 503
``ServiceUnavailable`` while it sheds load. CloudWatch Logs (JSON 1.1, one path, the operation in
``X-Amz-Target``) throttles with ``ThrottlingException`` (400) and fails with
``ServiceUnavailableException`` (500).

A connection can also drop: before the service saw the request (``reset``: nothing happened, the
client sees the connection closed without an answer) or after it acted on it (``lost``: the job
was submitted, but the answer never arrived). The second is why a client must not blindly send a
SubmitJob again: Batch has no idempotency token for it. An answer can also come late (``slow``: the
service acts at once, its answer arrives ``seconds`` later): a SubmitJob still in flight when its
task is killed creates a job the kill has not heard of yet.

``Faults`` is a WSGI layer in front of moto. ``arm(operation, times, kind, rate, seed)`` answers the
next calls of one operation with ``kind``; with ``rate`` below 1 each call is faulted with that
probability (a seeded generator: a run is repeatable) until ``times`` faults were served.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

CODE, MESSAGE, STATUS = "TooManyRequestsException", "Too Many Requests", "429 Too Many Requests"
#: Fault kind -> (service -> (HTTP status line, error code, message)); ``reset`` and ``lost`` answer nothing.
ANSWERS: dict[str, dict[str, tuple[str, str, str]]] = {
    "throttle": {
        "batch": (STATUS, CODE, MESSAGE),
        "logs": ("400 Bad Request", "ThrottlingException", "Rate exceeded"),
    },
    "server": {
        "batch": ("500 Internal Server Error", "ServerException", "Internal server error"),
        "logs": ("500 Internal Server Error", "ServiceUnavailableException", "The service cannot complete the request"),
    },
    "unavailable": {
        "batch": ("503 Service Unavailable", "ServiceUnavailable", "Service Unavailable"),
        "logs": ("503 Service Unavailable", "ServiceUnavailable", "Service Unavailable"),
    },
}
KINDS = (*ANSWERS, "reset", "lost", "slow")
LOGS_TARGET = "Logs_20140328."


def batch_paths() -> dict[str, str]:
    """Batch operation name -> its request path (``DescribeJobs`` -> ``/v1/describejobs``), from botocore."""
    return {name: path for name, path in _operations("batch").items()}


@functools.cache
def _operations(service: str) -> dict[str, str]:
    """Operation name -> request path of a botocore service model: read once per process, as each
    emulator's start asks (a botocore session and a parsed model, a fifth of a start's CPU)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model(service)
    return {name: model.operation_model(name).http["requestUri"] for name in model.operation_names}


@dataclass
class _Armed:
    kind: str
    times: int
    rate: float
    random: random.Random = field(default_factory=random.Random)
    hits: int = 0
    #: ``slow``: seconds the answer is held after the service acted.
    seconds: float = 0.0


class Faults:
    """Wraps moto's WSGI application; ``arm(operation, times, kind)`` fails that many calls to come."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.paths = batch_paths()
        self.logs_operations = frozenset(_operations("logs"))
        self._armed: dict[str, list[_Armed]] = {}  # "batch:/v1/describejobs" or "logs:GetLogEvents" -> faults
        self._lock = threading.Lock()

    def key(self, operation: str) -> str:
        """``SubmitJob`` (Batch), ``GetLogEvents`` or ``logs:GetLogEvents`` (CloudWatch Logs)."""
        service, _, name = operation.rpartition(":")
        if service in ("", "batch") and name in self.paths:
            return f"batch:{self.paths[name]}"
        if service in ("", "logs") and name in self.logs_operations:
            return f"logs:{name}"
        raise ValueError(f"{operation!r} is not an AWS Batch or CloudWatch Logs operation")

    def arm(
        self,
        operation: str,
        times: int = 1,
        kind: str = "throttle",
        rate: float = 1.0,
        seed: int | None = 0,
        seconds: float = 0.0,
    ) -> _Armed:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")
        if not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], not {rate}")
        armed = _Armed(kind, times, rate, random.Random(seed), seconds=float(seconds))
        key = self.key(operation)
        with self._lock:
            self._armed.setdefault(key, []).append(armed)
        return armed

    def armed(self) -> list[_Armed]:
        """Every fault armed so far, served or not (``hits`` of ``times``)."""
        with self._lock:
            return [armed for faults in self._armed.values() for armed in faults]

    def _fault_for(self, environ: dict[str, Any]) -> tuple[str, _Armed] | None:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith(LOGS_TARGET):
            key = f"logs:{target[len(LOGS_TARGET) :]}"
        else:
            key = f"batch:{environ.get('PATH_INFO', '')}"
        with self._lock:
            for armed in self._armed.get(key, []):
                if armed.hits < armed.times and (armed.rate >= 1 or armed.random.random() < armed.rate):
                    armed.hits += 1
                    return key.split(":", 1)[0], armed
        return None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        found = self._fault_for(environ)
        if found is None:
            return self.app(environ, start_response)
        service, armed = found
        if armed.kind == "lost":  # the service acts on the request; its answer never reaches the client
            for _ in self.app(environ, lambda *args, **kwargs: lambda data: None):
                pass
            return _drop(environ)
        if armed.kind == "slow":  # the service acts on the request; its answer is held (werkzeug: a thread each)
            answer = list(self.app(environ, start_response))
            time.sleep(armed.seconds)
            return answer
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))  # keep the connection usable
        if armed.kind == "reset":
            return _drop(environ)
        status, code, message = ANSWERS[armed.kind][service]
        body = json.dumps({"__type": code, "message": message}).encode()
        start_response(
            status,
            [
                ("Content-Type", "application/json" if service == "batch" else "application/x-amz-json-1.1"),
                ("Content-Length", str(len(body))),
                ("x-amzn-ErrorType", code),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ],
        )
        return [body]


def _drop(environ: dict[str, Any]) -> Iterable[bytes]:
    """Close the connection without an answer: the client reads end-of-stream where the status line should
    be (botocore: ``ConnectionClosedError``). Raising a ``ConnectionError`` makes werkzeug treat it as a
    client that went away, quietly."""
    connection = environ.get("werkzeug.socket")
    if connection is not None:
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
    raise ConnectionResetError("connection dropped by an injected fault")


#: The name this layer had while it only throttled Batch.
Throttle = Faults

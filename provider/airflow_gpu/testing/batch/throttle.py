"""Throttling as AWS Batch answers it: ``TooManyRequestsException``, "Too Many Requests", HTTP 429.

Batch's request rate limits are low (DescribeJobs especially), and a client is expected to back off
and retry (``BatchClientHook.get_job_description`` does, catching the error code). The real answer
is a REST-JSON error with status 429 and error code ``TooManyRequestsException`` (the SDKs print
"Too Many Requests (Service: AWSBatch; Status Code: 429; Error Code: TooManyRequestsException)");
botocore raises it as a ``ClientError`` with that code. ``Throttle`` is a WSGI layer in front of
moto that answers the next N calls of one Batch operation so.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

CODE, MESSAGE, STATUS = "TooManyRequestsException", "Too Many Requests", "429 Too Many Requests"


def batch_paths() -> dict[str, str]:
    """Batch operation name -> its request path (``DescribeJobs`` -> ``/v1/describejobs``), from botocore."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("batch")
    return {name: model.operation_model(name).http["requestUri"] for name in model.operation_names}


class Throttle:
    """Wraps moto's WSGI application; ``arm(operation, times)`` throttles that many calls to come."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.paths = batch_paths()
        self._pending: dict[str, int] = {}  # request path -> calls still to throttle
        self._lock = threading.Lock()

    def arm(self, operation: str, times: int) -> None:
        if operation not in self.paths:
            raise ValueError(f"{operation!r} is not an AWS Batch operation")
        with self._lock:
            self._pending[self.paths[operation]] = self._pending.get(self.paths[operation], 0) + times

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        with self._lock:
            throttled = self._pending.get(path, 0) > 0
            if throttled:
                self._pending[path] -= 1
        if not throttled:
            return self.app(environ, start_response)
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))  # keep the connection usable
        body = json.dumps({"__type": CODE, "message": MESSAGE}).encode()
        start_response(
            STATUS,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("x-amzn-ErrorType", CODE),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ],
        )
        return [body]

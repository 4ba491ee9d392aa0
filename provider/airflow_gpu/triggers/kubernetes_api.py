"""What the shared watch (``pod_watch``) needs of the Kubernetes API's answers, kept apart from its loop.

kubernetes_asyncio does not raise on an error status when a response is not preloaded (as the
watch's responses are not), and a ``Status`` carries the ``Retry-After`` a client must honour; a
pod is kept slim, without its spec, for 10,000 of them in one triggerer.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any


class ApiStatusError(Exception):
    """An error status from the API server, with what a client needs to decide on a retry."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


def slim(pod: dict[str, Any]) -> dict[str, Any]:
    """What tells how a pod ended (status, node, deletion, identity), without its spec and managed fields:
    kept for 10,000 pods in the triggerer, and carried in events to the worker."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    kept = ("name", "namespace", "uid", "labels", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")
    return {
        "metadata": {k: metadata[k] for k in kept if k in metadata},
        "spec": {k: spec[k] for k in ("nodeName", "terminationGracePeriodSeconds") if k in spec},
        "status": pod.get("status") or {},
    }


async def checked(response: Any) -> Any:
    """The response, or its error: without preloading, kubernetes_asyncio does not raise on a status."""
    if response.status < 400:
        return response
    try:
        body = (await response.read()).decode("utf-8", "replace")
    finally:
        response.release()
    raise status_error(response.status, body, response.headers.get("Retry-After"))


def resource_version(pod: Mapping[str, Any] | None) -> str | None:
    return ((pod or {}).get("metadata") or {}).get("resourceVersion")


def status_error(status: int, body: Any, retry_after: Any) -> ApiStatusError:
    message = str(body)
    with contextlib.suppress(Exception):
        parsed = json.loads(body)
        message = parsed.get("message") or message
        if retry_after is None:
            retry_after = (parsed.get("details") or {}).get("retryAfterSeconds")
    seconds = None
    with contextlib.suppress(TypeError, ValueError):
        seconds = float(retry_after) if retry_after is not None else None
    return ApiStatusError(int(status or 500), message, seconds)

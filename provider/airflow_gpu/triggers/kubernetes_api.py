"""What the shared watch (``pod_watch``) needs of the Kubernetes API's answers, kept apart from its loop.

Which objects an informer lists and watches (``Kind``: the provider's pods, or its training Jobs)
and the state it keeps of each. kubernetes_asyncio does not raise on an error status when a
response is not preloaded (as the watch's responses are not), and a ``Status`` carries the
``Retry-After`` a client must honour; a pod is kept slim, without its spec, for 10,000 of them in
one triggerer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_gpu.spot.training_job import INDEX_KEY
from airflow_gpu.utils.training_job import JOB_LABEL


@dataclass(frozen=True)
class Kind:
    """What one informer lists and watches: the provider's pods, or its training Jobs (by their label)."""

    plural: str
    selector: str

    def calls(self, client: Any) -> tuple[Any, Any]:
        """The API's list and read functions for this kind."""
        if self.plural == "jobs":
            from kubernetes_asyncio.client import BatchV1Api

            jobs = BatchV1Api(client)
            return jobs.list_namespaced_job, jobs.read_namespaced_job
        from kubernetes_asyncio.client import CoreV1Api

        core = CoreV1Api(client)
        return core.list_namespaced_pod, core.read_namespaced_pod


#: The label every pod the provider creates carries; the shared watch selects on it.
WATCH_LABEL = "airflow-gpu/accelerator"
PODS = Kind("pods", WATCH_LABEL)
JOBS = Kind("jobs", JOB_LABEL)
#: A group of pods: a label and its value (the pods of one training Job).
Group = tuple[str, str]


@dataclass
class PodState:
    """The last state seen of one pod (or Job); ``deleted`` once the API said it is gone."""

    pod: dict[str, Any] | None
    version: int  # this watch's own counter, so a waiter sees each change once
    deleted: bool = False


class ApiStatusError(Exception):
    """An error status from the API server, with what a client needs to decide on a retry."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


def slim(pod: dict[str, Any]) -> dict[str, Any]:
    """What tells how a pod ended (status, node, deletion, identity), without its spec and managed fields:
    kept for 10,000 pods in the triggerer, and carried in events to the worker. Of the annotations,
    only a training Job's rank (labelled too from Kubernetes 1.28)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    kept = ("name", "namespace", "uid", "labels", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")
    rank = (metadata.get("annotations") or {}).get(INDEX_KEY)
    return {
        "metadata": {k: metadata[k] for k in kept if k in metadata}
        | ({"annotations": {INDEX_KEY: rank}} if rank else {}),
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


def labels_of(pod: dict[str, Any] | None) -> dict[str, str]:
    return ((pod or {}).get("metadata") or {}).get("labels") or {}


async def sleep_on(wakers: dict[Any, set[asyncio.Future[None]]], key: Any) -> None:
    """Until ``key``'s waiters are woken (``SharedPodWatch._wake``)."""
    waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    wakers.setdefault(key, set()).add(waker)
    try:
        await waker
    finally:
        wakers.get(key, set()).discard(waker)
        if not wakers.get(key):
            wakers.pop(key, None)

"""One list+watch of GPU pods per cluster and namespace in a triggerer, shared by every waiting trigger.

The official ``KubernetesPodTrigger`` reads its pod every ``poll_interval`` (2 s): 1,000 deferred
pods are about 500 GET/s, which API Priority and Fairness throttles (429) and which keeps the
triggerer's event loop busy building clients (apache/airflow#40018). Here every trigger of one
cluster and namespace in a process registers the pod it waits for with one ``SharedPodWatch``,
which does what an informer does: LIST the provider's pods (label ``airflow-gpu/accelerator``),
WATCH from the list's ``resourceVersion`` with bookmarks, and hand each trigger every new state
of its pod. One watch serves 10,000 pods with one long request.

The watch survives what a real API server does to it: a stream that ends (timeout, restart,
proxy) is opened again from the last ``resourceVersion`` seen (bookmarks keep it recent);
``410 Expired`` (history compacted) lists again, and a pod missing from the new list is reported
deleted with its last state, as an informer's relist does; 429 and 5xx back off with jitter,
honouring ``Retry-After``; 401 (an exec-plugin token that expired) loads the configuration
again. Where RBAC does not grant ``watch pods``, it says so once and LISTs the namespace every
``poll_interval`` instead: one request per namespace, never one per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

log = logging.getLogger(__name__)

#: The label every pod the provider creates carries; the shared watch selects on it.
WATCH_LABEL = "airflow-gpu/accelerator"
#: Seconds a watch request lasts before it is opened again (the API server caps it at 30-60 min).
WATCH_SECONDS = 300
#: Backoff after an error: first wait, cap, and the jitter fraction.
BACKOFF_FIRST, BACKOFF_MAX, JITTER = 0.5, 30.0, 0.5
#: Connection extras that name a kubeconfig, and their old prefix.
KUBECONFIG_EXTRAS, EXTRA_PREFIX = frozenset({"kube_config_path"}), "extra__kubernetes__"
#: Seconds the loop lingers without waiters before it stops (a trigger that restarts reuses it).
LINGER_SECONDS = 30.0


@dataclass(frozen=True)
class ClusterConnection:
    """How a trigger reaches its cluster: KPO's fields, so both read a connection alike."""

    kubernetes_conn_id: str | None = None
    connection_extras: Mapping[str, Any] | None = None
    cluster_context: str | None = None
    config_dict: Mapping[str, Any] | None = None
    in_cluster: bool | None = None

    @property
    def key(self) -> str:
        """Identity of the cluster for sharing: the same fields share one watch."""
        return json.dumps(
            [self.kubernetes_conn_id, self.connection_extras, self.cluster_context, self.config_dict, self.in_cluster],
            sort_keys=True,
            default=str,
        )

    def hook(self) -> Any:
        """The async hook, reading the cluster as the worker's sync hook did.

        The operator's ``config_file`` (here ``config_dict``) replaces the connection's
        ``kube_config_path``, as in ``KubernetesHook.get_conn``; ``AsyncKubernetesHook`` instead
        refuses the pair as "mutually exclusive", which fails the official trigger of a KPO with
        ``config_file`` whose connection also names a kubeconfig file. That field is dropped then.
        """
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        extras = dict(self.connection_extras) if self.connection_extras is not None else None
        if self.config_dict:
            extras = {k: v for k, v in (extras or {}).items() if k.removeprefix(EXTRA_PREFIX) not in KUBECONFIG_EXTRAS}
        return AsyncKubernetesHook(
            conn_id=self.kubernetes_conn_id,
            in_cluster=self.in_cluster,
            config_dict=dict(self.config_dict) if self.config_dict else None,
            cluster_context=self.cluster_context,
            connection_extras=extras,
        )


@dataclass
class PodState:
    """The last state seen of one pod; ``deleted`` once the API said it is gone."""

    pod: dict[str, Any] | None
    version: int  # this watch's own counter, so a waiter sees each change once
    deleted: bool = False


class ApiStatusError(Exception):
    """An error status from the API server, with what a client needs to decide on a retry."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


@dataclass
class SharedPodWatch:
    """The informer for one (cluster, namespace) in this process."""

    connection: ClusterConnection
    namespace: str
    poll_interval: float = 2.0
    states: dict[str, PodState] = field(default_factory=dict)
    waiters: dict[str, int] = field(default_factory=dict)  # pod name -> triggers waiting on it
    resource_version: str | None = None
    polling: bool = False  # RBAC does not grant watch: LIST every poll_interval instead
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _counter: int = 0
    _task: asyncio.Task[None] | None = None
    requests: int = 0  # LIST and WATCH requests made, for the benchmark and the tests
    error: ApiStatusError | None = None  # the namespace cannot be listed at all (RBAC): waiters hear it

    #: Per event loop: ``airflow dags test`` runs each trigger in a loop of its own, and a watch's
    #: task and condition belong to the loop that made them.
    _loops: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], SharedPodWatch]]] = (
        weakref.WeakKeyDictionary()
    )

    @classmethod
    def get(cls, connection: ClusterConnection, namespace: str, poll_interval: float = 2.0) -> SharedPodWatch:
        """The process's watch of ``namespace`` on ``connection``'s cluster, in the running event loop."""
        watches = cls._loops.setdefault(asyncio.get_running_loop(), {})
        key = (connection.key, namespace)
        watch = watches.get(key)
        if watch is None:
            watch = watches[key] = cls(connection, namespace, poll_interval)
        return watch

    @classmethod
    def in_this_loop(cls) -> list[SharedPodWatch]:
        """The watches of the running event loop (for tests and the benchmark)."""
        return list(cls._loops.get(asyncio.get_running_loop(), {}).values())

    # --- what a trigger calls -------------------------------------------------------------

    async def next_state(self, name: str, seen: int = 0) -> PodState:
        """The pod's next state after the one numbered ``seen`` (0: the first one known).

        A pod the synced cache does not know is looked up once (it may have been deleted before
        the trigger started): a 404 gives a deleted state without a last-seen pod.
        """
        self.waiters[name] = self.waiters.get(name, 0) + 1
        try:
            self._ensure_running()
            looked_up = False
            async with self._changed:
                while True:
                    state = self.states.get(name)
                    if state is not None and state.version > seen:
                        return state
                    if self.error is not None:
                        raise self.error
                    if state is None and self.synced.is_set() and not looked_up:
                        looked_up = True
                        self._changed.release()
                        try:
                            await self._look_up(name)
                        finally:
                            await self._changed.acquire()
                        continue
                    if self._task is not None and self._task.done():
                        self._ensure_running()
                    await self._changed.wait()
        finally:
            self.waiters[name] -= 1
            if not self.waiters[name]:
                del self.waiters[name]

    def forget(self, name: str) -> None:
        """The trigger is done with the pod (it will not ask again)."""
        if name not in self.waiters:
            self.states.pop(name, None)

    # --- the informer ---------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"airflow-gpu-watch-{self.namespace}")

    async def _record(self, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
        async with self._changed:
            self._counter += 1
            previous = self.states.get(name)
            self.states[name] = PodState(pod if pod is not None else (previous.pod if previous else None),
                                         self._counter, deleted)  # fmt: skip
            self._changed.notify_all()

    async def _run(self) -> None:
        delay = BACKOFF_FIRST
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            if not self.waiters:
                idle_since = idle_since or loop.time()
                if loop.time() - idle_since > LINGER_SECONDS:
                    return
            else:
                idle_since = None
            try:
                async with self.connection.hook().get_conn() as api:
                    while True:
                        if self.resource_version is None or self.polling:
                            await self._list(api)
                        if self.polling:
                            delay = BACKOFF_FIRST
                            await asyncio.sleep(self.poll_interval)
                        else:
                            await self._watch(api)
                            delay = BACKOFF_FIRST
                        if not self.waiters and loop.time() - (idle_since or loop.time()) > LINGER_SECONDS:
                            return
                        if not self.waiters:
                            idle_since = idle_since or loop.time()
            except asyncio.CancelledError:
                raise
            except ApiStatusError as error:
                if error.status == 410:  # compacted: list again
                    self.resource_version = None
                    continue
                if error.status == 403 and self.resource_version is None and not self.polling:
                    async with self._changed:  # not even LIST: nothing to wait for, every waiter hears why
                        self.error = error
                        self._changed.notify_all()
                    log.error("Cannot list pods in namespace %s: %s", self.namespace, error.message)
                    await asyncio.sleep(max(self.poll_interval, delay))
                    delay = min(BACKOFF_MAX, delay * 2)
                    continue
                if error.status == 403 and not self.polling:
                    self.polling = True
                    log.warning(
                        "RBAC does not grant `watch pods` in namespace %s (%s); listing the namespace every "
                        "%.0f s instead. Grant watch for one long request instead of a LIST per interval.",
                        self.namespace, error.message, self.poll_interval,
                    )  # fmt: skip
                    continue
                wait = error.retry_after if error.retry_after is not None else delay
                log.info("Kubernetes API answered %s; watching again in %.1f s", error, wait)
                await asyncio.sleep(wait * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)
            except Exception as error:  # a reset, a timeout, a proxy: back off and go on
                log.info("The watch of pods in %s stopped (%s: %s); again in %.1f s",
                         self.namespace, type(error).__name__, error, delay)  # fmt: skip
                await asyncio.sleep(delay * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)

    async def _request(self, api: Any, **params: Any) -> Any:
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        self.requests += 1
        try:
            response = await CoreV1Api(api).list_namespaced_pod(
                self.namespace, label_selector=WATCH_LABEL, _preload_content=False, **params
            )
        except ApiException as error:
            headers: Mapping[str, str] = error.headers or {}
            raise _status_error(error.status, error.body, headers.get("Retry-After")) from error
        return await _checked(response)

    async def _list(self, api: Any) -> None:
        response = await self._request(api, _request_timeout=60)
        body = json.loads(await response.read())
        listed = {item["metadata"]["name"]: item for item in body.get("items") or []}
        for name, pod in listed.items():
            known = self.states.get(name)
            if known is None or known.deleted or _version(known.pod) != _version(pod):
                await self._record(name, pod)
        for name, state in list(self.states.items()):
            if name not in listed and not state.deleted:  # gone while we were not watching
                await self._record(name, None, deleted=True)
        self.resource_version = body.get("metadata", {}).get("resourceVersion")
        self.error = None
        self.synced.set()
        async with self._changed:
            self._changed.notify_all()  # waiters for pods the list did not have may look them up now

    async def _watch(self, api: Any) -> None:
        seconds = int(WATCH_SECONDS * random.uniform(0.9, 1.1))  # not every watch reopens at once
        response = await self._request(
            api,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _request_timeout=seconds + 30,
        )
        try:
            async for raw in response.content:
                if not raw.strip():
                    continue
                event = json.loads(raw)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise _status_error(obj.get("code", 500), json.dumps(obj), None)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    self.resource_version = version or self.resource_version
                    continue
                name = obj["metadata"]["name"]
                await self._record(name, obj, deleted=kind == "DELETED")
                self.resource_version = version or self.resource_version
        finally:
            response.release()

    async def _look_up(self, name: str) -> None:
        """One GET for a pod the list did not have: gone before we watched, or created since."""
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self.connection.hook().get_conn() as api:
                self.requests += 1
                try:
                    response = await _checked(
                        await CoreV1Api(api).read_namespaced_pod(
                            name, self.namespace, _preload_content=False, _request_timeout=60
                        )
                    )
                except (ApiException, ApiStatusError) as error:
                    if error.status == 404 and name not in self.states:
                        await self._record(name, None, deleted=True)
                    return
                pod = json.loads(await response.read())
                if name not in self.states:
                    await self._record(name, pod)


async def _checked(response: Any) -> Any:
    """The response, or its error: without preloading, kubernetes_asyncio does not raise on a status."""
    if response.status < 400:
        return response
    try:
        body = (await response.read()).decode("utf-8", "replace")
    finally:
        response.release()
    raise _status_error(response.status, body, response.headers.get("Retry-After"))


def _version(pod: Mapping[str, Any] | None) -> str | None:
    return ((pod or {}).get("metadata") or {}).get("resourceVersion")


def _status_error(status: int, body: Any, retry_after: Any) -> ApiStatusError:
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

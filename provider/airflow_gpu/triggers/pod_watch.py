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

from airflow_gpu.triggers.kubernetes_api import ApiStatusError, checked, resource_version, slim, status_error

log = logging.getLogger(__name__)

#: The label every pod the provider creates carries; the shared watch selects on it.
WATCH_LABEL = "airflow-gpu/accelerator"
#: Seconds a watch request lasts before it is opened again (the API server caps it at 30-60 min).
WATCH_SECONDS = 300
#: Backoff after an error: first wait, cap, and the jitter fraction.
BACKOFF_FIRST, BACKOFF_MAX, JITTER = 0.5, 30.0, 0.5
#: Connection extras that name a kubeconfig, and their old prefix.
KUBECONFIG_EXTRAS, EXTRA_PREFIX = frozenset({"kube_config_path"}), "extra__kubernetes__"
#: Requests failed in a row before the waiting triggers hear the error (about a minute of backoff).
MAX_FAILURES = 6
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
    _wakers: dict[str | None, set[asyncio.Future[None]]] = field(default_factory=dict)  # None: every waiter
    _counter: int = 0
    failures: int = 0  # requests failed in a row; past MAX_FAILURES every waiter hears the last error
    _task: asyncio.Task[None] | None = None
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

        A pod the synced cache does not know is looked up once (it was created after the list, or
        deleted before the trigger started): a 404 gives a deleted state without a last-seen pod.
        Raises the API's error when the namespace cannot be listed or watched for a while.
        """
        self.waiters[name] = self.waiters.get(name, 0) + 1
        looked_up = False
        try:
            while True:
                self._ensure_running()
                state = self.states.get(name)
                if state is not None and state.version > seen:
                    return state
                if self.error is not None:
                    raise self.error
                if state is None and self.synced.is_set() and not looked_up:
                    looked_up = True
                    await self._look_up(name)
                    continue
                waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._wakers.setdefault(name, set()).add(waker)
                try:
                    await waker
                finally:
                    self._wakers.get(name, set()).discard(waker)
                    if not self._wakers.get(name):
                        self._wakers.pop(name, None)
        finally:
            self.waiters[name] -= 1
            if not self.waiters[name]:
                del self.waiters[name]

    def forget(self, name: str) -> None:
        """The trigger is done with the pod (it will not ask again): its state is dropped."""
        if name not in self.waiters:
            self.states.pop(name, None)

    def _wake(self, name: str | None = None) -> None:
        """Wake the waiters of one pod (``None``: every waiter, for an error or a finished list)."""
        names = list(self._wakers) if name is None else [name]
        for key in names:
            for waker in self._wakers.get(key, ()):
                if not waker.done():
                    waker.set_result(None)

    # --- the informer ---------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"airflow-gpu-watch-{self.namespace}")

    async def _record(self, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
        """A pod's new state, kept only while a trigger waits on it, and only what tells how it ended."""
        if name not in self.waiters:
            self.states.pop(name, None)  # nobody waits: a trigger that comes later looks it up
            return
        self._counter += 1
        previous = self.states.get(name)
        kept = slim(pod) if pod is not None else (previous.pod if previous else None)
        self.states[name] = PodState(kept, self._counter, deleted)
        self._wake(name)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._serve(loop)
        finally:  # a finished (or cancelled, at loop shutdown) watch lets its loop go
            watches = self._loops.get(loop, {})
            if watches.get((self.connection.key, self.namespace)) is self:
                del watches[(self.connection.key, self.namespace)]
                if not watches:
                    self._loops.pop(loop, None)
            self._task = None

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        delay = BACKOFF_FIRST
        idle_since: float | None = None
        while True:
            if self.waiters:
                idle_since = None
            elif loop.time() - (idle_since := idle_since or loop.time()) > LINGER_SECONDS:
                return
            try:
                async with self.connection.hook().get_conn() as api:
                    while self.waiters or loop.time() - (idle_since or loop.time()) <= LINGER_SECONDS:
                        if self.resource_version is None or self.polling:
                            await self._list(api)
                        if self.polling:
                            await asyncio.sleep(self.poll_interval)
                        elif not await self._watch(api):
                            await asyncio.sleep(BACKOFF_FIRST)  # closed at once, without an event: not a busy loop
                        self._succeeded()
                        delay = BACKOFF_FIRST
                        if not self.waiters:
                            idle_since = idle_since or loop.time()
                    return
            except asyncio.CancelledError:
                raise
            except ApiStatusError as error:
                if error.status == 410:  # compacted: list again
                    self.resource_version = None
                    continue
                if error.status == 403 and self.resource_version is not None and not self.polling:
                    self.polling = True
                    log.warning(
                        "RBAC does not grant `watch pods` in namespace %s (%s); listing the namespace every "
                        "%.0f s instead. Grant watch for one long request instead of a LIST per interval.",
                        self.namespace, error.message, self.poll_interval,
                    )  # fmt: skip
                    continue
                wait = error.retry_after if error.retry_after is not None else delay
                self._failed(error, f"answered {error}")
                await asyncio.sleep(wait * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)
            except Exception as error:  # a reset, a timeout, a proxy, a configuration that does not load
                self._failed(error, f"stopped ({type(error).__name__}: {error})")
                await asyncio.sleep(delay * (1 + random.uniform(0, JITTER)))
                delay = min(BACKOFF_MAX, delay * 2)

    def _succeeded(self) -> None:
        self.failures = 0
        if self.error is not None:
            self.error = None

    def _failed(self, error: Exception, what: str) -> None:
        """Count a failed request; a 403 on LIST at once, or MAX_FAILURES in a row, reach every waiter.

        The official trigger turns a failing GET into an ``error`` event (``trigger_reentry`` then
        defers again): waiting on a watch that cannot be had would instead look like a pod that
        never starts, or wait forever.
        """
        self.failures += 1
        log.info("The watch of pods in %s %s; again shortly (%d in a row)", self.namespace, what, self.failures)
        denied = isinstance(error, ApiStatusError) and error.status == 403
        if denied or self.failures >= MAX_FAILURES:
            self.error = error if isinstance(error, ApiStatusError) else ApiStatusError(0, what)
            if denied:
                log.error("Cannot list pods in namespace %s: %s", self.namespace, self.error.message)
            self._wake()

    async def _request(self, api: Any, **params: Any) -> Any:
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            response = await CoreV1Api(api).list_namespaced_pod(
                self.namespace, label_selector=WATCH_LABEL, _preload_content=False, **params
            )
        except ApiException as error:
            headers: Mapping[str, str] = error.headers or {}
            raise status_error(error.status, error.body, headers.get("Retry-After")) from error
        return await checked(response)

    async def _list(self, api: Any) -> None:
        response = await self._request(api, _request_timeout=60)
        body = json.loads(await response.read())
        listed = {item["metadata"]["name"]: item for item in body.get("items") or []}
        for name, pod in listed.items():
            known = self.states.get(name)
            if known is None or known.deleted or resource_version(known.pod) != resource_version(pod):
                await self._record(name, pod)
        for name, state in list(self.states.items()):
            if name not in listed and not state.deleted:  # gone while we were not watching
                await self._record(name, None, deleted=True)
        self.resource_version = body.get("metadata", {}).get("resourceVersion")
        self._succeeded()
        self.synced.set()
        self._wake()  # waiters for pods the list did not have may look them up now

    async def _watch(self, api: Any) -> bool:
        """One watch request, to its end; True if it brought anything (an event or a bookmark)."""
        seconds = int(WATCH_SECONDS * random.uniform(0.9, 1.1))  # not every watch reopens at once
        response = await self._request(
            api,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _request_timeout=seconds + 30,
        )
        brought = False
        try:
            pending = b""
            async for chunk in response.content.iter_any():  # not readline: a pod's line may pass 128 KiB
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    if raw.strip():
                        brought = True
                        await self._event(json.loads(raw))
            if pending.strip():
                await self._event(json.loads(pending))
        finally:
            response.release()
        return brought

    async def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise status_error(obj.get("code", 500), json.dumps(obj), None)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            await self._record(obj["metadata"]["name"], obj, deleted=kind == "DELETED")
        self.resource_version = version or self.resource_version

    async def _look_up(self, name: str) -> None:
        """One GET for a pod the list did not have: gone before we watched, or created since."""
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self.connection.hook().get_conn() as api:
                try:
                    response = await checked(
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

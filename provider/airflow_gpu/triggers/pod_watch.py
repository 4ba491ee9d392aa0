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

A trigger that waits on the pods of a training Job does not know their names (the Job controller
makes them up): it holds a *group*, a label and its value, and hears of every pod that carries it.
The same informer, of ``kind=JOBS``, watches the provider's training Jobs, whose conditions are the
Job controller's verdict (``spot.training_job``).
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

from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.kubernetes_api import (
    PODS,
    ApiStatusError,
    Group,
    Kind,
    PodState,
    checked,
    labels_of,
    resource_version,
    sleep_on,
    slim,
    status_error,
)
from airflow_gpu.triggers.kubernetes_api import WATCH_LABEL as WATCH_LABEL  # where the tests and bench look

log = logging.getLogger(__name__)

#: Seconds a watch request lasts before it is opened again (the API server caps it at 30-60 min).
WATCH_SECONDS = 300
#: Backoff after an error: first wait, cap, and the jitter fraction.
BACKOFF_FIRST, BACKOFF_MAX, JITTER = 0.5, 30.0, 0.5
#: Requests failed in a row before the waiting triggers hear the error (about a minute of backoff).
MAX_FAILURES = 6
#: Seconds the loop lingers without waiters before it stops (a trigger that restarts reuses it).
LINGER_SECONDS = 30.0


@dataclass
class SharedPodWatch:
    """The informer for one (cluster, namespace, kind) in this process."""

    connection: ClusterConnection
    namespace: str
    poll_interval: float = 2.0
    kind: Kind = PODS
    states: dict[str, PodState] = field(default_factory=dict)
    waiters: dict[str, int] = field(default_factory=dict)  # pod name -> triggers waiting on it
    groups: dict[Group, int] = field(default_factory=dict)  # group -> triggers holding it
    _seeded: set[Group] = field(default_factory=set)  # groups whose pods were listed once
    resource_version: str | None = None
    polling: bool = False  # RBAC does not grant watch: LIST every poll_interval instead
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    _wakers: dict[str | None, set[asyncio.Future[None]]] = field(default_factory=dict)  # None: every waiter
    _group_wakers: dict[Group, set[asyncio.Future[None]]] = field(default_factory=dict)
    _counter: int = 0
    failures: int = 0  # requests failed in a row; past MAX_FAILURES every waiter hears the last error
    _task: asyncio.Task[None] | None = None
    error: ApiStatusError | None = None  # the namespace cannot be listed at all (RBAC): waiters hear it

    #: Per event loop: ``airflow dags test`` runs each trigger in a loop of its own, and a watch's
    #: task and condition belong to the loop that made them.
    _loops: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, ...], SharedPodWatch]]] = (
        weakref.WeakKeyDictionary()
    )

    @classmethod
    def get(
        cls, connection: ClusterConnection, namespace: str, poll_interval: float = 2.0, kind: Kind = PODS
    ) -> SharedPodWatch:
        """The process's watch of ``kind`` in ``namespace`` on ``connection``'s cluster, in the running loop."""
        watches = cls._loops.setdefault(asyncio.get_running_loop(), {})
        key = (connection.key, namespace, kind.plural)
        watch = watches.get(key)
        if watch is None:
            watch = watches[key] = cls(connection, namespace, poll_interval, kind)
        return watch

    @property
    def _key(self) -> tuple[str, ...]:
        return (self.connection.key, self.namespace, self.kind.plural)

    @classmethod
    def in_this_loop(cls) -> list[SharedPodWatch]:
        """The watches of the running event loop (for tests and the benchmark)."""
        return list(cls._loops.get(asyncio.get_running_loop(), {}).values())

    # --- what a trigger calls -------------------------------------------------------------

    async def next_state(self, name: str, seen: int = 0) -> PodState:
        """The pod's (or Job's) next state after the one numbered ``seen`` (0: the first one known).

        A pod the synced cache does not know is looked up once (it was created after the list, or
        deleted before the trigger started): a 404 gives a deleted state without a last-seen pod.
        Raises the API's error when the namespace cannot be listed or watched for a while.
        """
        self.hold(name)
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
                await sleep_on(self._wakers, name)
        finally:
            self.release(name)

    def hold(self, name: str) -> None:
        """Keep the object's states while the trigger does other things between ``next_state`` calls."""
        self.waiters[name] = self.waiters.get(name, 0) + 1

    def release(self, name: str) -> None:
        self.waiters[name] -= 1
        if not self.waiters[name]:
            del self.waiters[name]

    def forget(self, name: str) -> None:
        """The trigger is done with the pod (it will not ask again): its state is dropped."""
        if name not in self.waiters and not self._grouped((self.states.get(name) or PodState(None, 0)).pod):
            self.states.pop(name, None)

    # --- groups: the pods of a training Job, whose names the Job controller makes up -------

    def hold_group(self, label: str, value: str) -> None:
        """Keep every pod labelled ``label=value`` from now on, until ``release_group`` (from a running loop)."""
        self.groups[(label, value)] = self.groups.get((label, value), 0) + 1
        self._ensure_running()

    def release_group(self, label: str, value: str) -> None:
        key = (label, value)
        self.groups[key] -= 1
        if self.groups[key]:
            return
        del self.groups[key]
        self._seeded.discard(key)
        for name in [n for n, s in self.states.items() if labels_of(s.pod).get(label) == value]:
            self.forget(name)

    def members(self, label: str, value: str) -> dict[str, PodState]:
        return {name: s for name, s in self.states.items() if labels_of(s.pod).get(label) == value}

    async def next_group(self, label: str, value: str, seen: int = 0) -> tuple[int, dict[str, PodState]]:
        """Every known pod of a held group, once one of them changed after ``seen`` (the version returned
        last); the group's pods that existed before it was held are listed once (one LIST, not a GET each).
        Raises the API's error when the namespace cannot be listed or watched for a while."""
        key = (label, value)
        if key not in self.groups:
            raise RuntimeError(f"hold_group({label!r}, {value!r}) before waiting on it")
        while True:
            self._ensure_running()
            found = self.members(label, value)
            version = max((s.version for s in found.values()), default=0)
            if version > seen:
                return version, found
            if self.error is not None:
                raise self.error
            if self.synced.is_set() and key not in self._seeded:
                self._seeded.add(key)
                await self._look_up_group(label, value)
                continue
            await sleep_on(self._group_wakers, key)

    def _grouped(self, pod: dict[str, Any] | None) -> bool:
        labels = labels_of(pod)
        return any(labels.get(label) == value for label, value in self.groups)

    def _wake(self, name: str | None = None, pod: dict[str, Any] | None = None) -> None:
        """Wake the waiters of one pod and of its groups (``None``: every waiter, for an error or a list)."""
        names = list(self._wakers) if name is None else [name]
        wakers = [w for key in names for w in self._wakers.get(key, ())]
        labels = labels_of(pod)
        groups = self._group_wakers if name is None else {k: v for k, v in self._group_wakers.items()
                                                          if labels.get(k[0]) == k[1]}  # fmt: skip
        wakers += [w for found in groups.values() for w in found]
        for waker in wakers:
            if not waker.done():
                waker.set_result(None)

    # --- the informer ---------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            name = f"airflow-gpu-watch-{self.kind.plural}-{self.namespace}"
            self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def _record(self, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
        """A pod's new state, kept only while a trigger waits on it (or on its group), and only what
        tells how it ended."""
        previous = self.states.get(name)
        last = pod if pod is not None else (previous.pod if previous else None)
        if name not in self.waiters and not (self.groups and self._grouped(last)):
            self.states.pop(name, None)  # nobody waits: a trigger that comes later looks it up
            return
        kept = slim(pod) if pod is not None else last
        self._counter += 1
        self.states[name] = PodState(kept, self._counter, deleted)
        self._wake(name, kept)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._serve(loop)
        finally:  # a finished (or cancelled, at loop shutdown) watch lets its loop go
            watches = self._loops.get(loop, {})
            if watches.get(self._key) is self:
                del watches[self._key]
                if not watches:
                    self._loops.pop(loop, None)
            self._task = None

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        delay = BACKOFF_FIRST
        idle_since: float | None = None
        while True:
            if self.waiters or self.groups:
                idle_since = None
            elif loop.time() - (idle_since := idle_since or loop.time()) > LINGER_SECONDS:
                return
            try:
                async with self.connection.hook().get_conn() as api:
                    while self.waiters or self.groups or loop.time() - (idle_since or loop.time()) <= LINGER_SECONDS:
                        if self.resource_version is None or self.polling:
                            await self._list(api)
                        if self.polling:
                            await asyncio.sleep(self.poll_interval)
                        elif not await self._watch(api):
                            await asyncio.sleep(BACKOFF_FIRST)  # closed at once, without an event: not a busy loop
                        self._succeeded()
                        delay = BACKOFF_FIRST
                        if not (self.waiters or self.groups):
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
                        "RBAC does not grant `watch %s` in namespace %s (%s); listing the namespace every "
                        "%.0f s instead. Grant watch for one long request instead of a LIST per interval.",
                        self.kind.plural, self.namespace, error.message, self.poll_interval,
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
        log.info(
            "The watch of %s in %s %s; again shortly (%d in a row)",
            self.kind.plural,
            self.namespace,
            what,
            self.failures,
        )
        denied = isinstance(error, ApiStatusError) and error.status == 403
        if denied or self.failures >= MAX_FAILURES:
            self.error = error if isinstance(error, ApiStatusError) else ApiStatusError(0, what)
            if denied:
                log.error("Cannot list %s in namespace %s: %s", self.kind.plural, self.namespace, self.error.message)
            self._wake()

    async def _request(self, api: Any, selector: str | None = None, **params: Any) -> Any:
        from kubernetes_asyncio.client.exceptions import ApiException

        listing, _ = self.kind.calls(api)
        try:
            response = await listing(
                self.namespace, label_selector=selector or self.kind.selector, _preload_content=False, **params
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
        from kubernetes_asyncio.client.exceptions import ApiException

        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self.connection.hook().get_conn() as api:
                _, read = self.kind.calls(api)
                try:
                    response = await checked(
                        await read(name, self.namespace, _preload_content=False, _request_timeout=60)
                    )
                except (ApiException, ApiStatusError) as error:
                    if error.status == 404 and name not in self.states:
                        await self._record(name, None, deleted=True)
                    return
                pod = json.loads(await response.read())
                if name not in self.states:
                    await self._record(name, pod)

    async def _look_up_group(self, label: str, value: str) -> None:
        """One LIST of a group's pods that existed before it was held (the watch kept none of them)."""
        with contextlib.suppress(Exception):  # the watch still tells; this only closes a gap
            async with self.connection.hook().get_conn() as api:
                response = await self._request(
                    api, selector=f"{self.kind.selector},{label}={value}", _request_timeout=60
                )
                for pod in json.loads(await response.read()).get("items") or []:
                    if pod["metadata"]["name"] not in self.states:
                        await self._record(pod["metadata"]["name"], pod)

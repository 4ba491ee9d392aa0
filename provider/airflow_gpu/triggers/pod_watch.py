"""One list+watch of GPU pods per cluster and namespace in a triggerer, shared by every waiting trigger.

The official ``KubernetesPodTrigger`` reads its pod every ``poll_interval`` (2 s): 1,000 deferred
pods are about 500 GET/s, which API Priority and Fairness throttles (429) and which keeps the
triggerer's event loop busy building clients (apache/airflow#40018). Here every trigger of one
cluster and namespace in a process registers the pod it waits for with one ``SharedPodWatch``,
which does what an informer does: LIST the provider's pods (label ``airflow-gpu/accelerator``),
WATCH from the list's ``resourceVersion`` with bookmarks, and hand each trigger every new state
of its pod. One watch serves 10,000 pods with one long request. It keeps the last state of every
pod it lists or hears of (slim, only the provider's, an ended one for ``ENDED_SECONDS``): after a
triggerer restart, thousands of triggers come over some seconds, after the list, and each finds
its pod there instead of sending a GET.

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
Job controller's verdict (``spot.training_job``). Its requests to the API server (list, watch, list
again, back off) are ``list_watch``'s; here are the waiters and the states they wait on.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.kubernetes_api import (
    PODS,
    ApiStatusError,
    Group,
    Kind,
    PodState,
    labels_of,
    resource_version,
    sleep_on,
    slim,
)
from airflow_gpu.triggers.kubernetes_api import WATCH_LABEL as WATCH_LABEL  # where the tests and bench look
from airflow_gpu.triggers.list_watch import ListWatch

#: Seconds an ended pod (or Job) nobody waits on stays known: its trigger may come after a restart.
ENDED_SECONDS = 600.0


def ended(obj: dict[str, Any] | None) -> bool:
    """A pod in a final phase, or a Job with a final condition: it changes no more until it goes."""
    status = (obj or {}).get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or ()
    )


@dataclass
class SharedPodWatch(ListWatch):
    """The informer for one (cluster, namespace, kind) in this process: its waiters and the states they wait
    on; how it learns them is ``ListWatch``'s."""

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
    _ended: dict[str, float] = field(default_factory=dict)  # name -> when it ended or went (oldest first)
    _expired: dict[str, str | None] = field(default_factory=dict)  # ended, dropped: name -> its resourceVersion

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
        """The trigger is done with the pod (it will not ask again): an ended or deleted pod's state is
        dropped; one that still runs stays known, for a trigger that comes for it later."""
        state = self.states.get(name)
        if state is None or name in self.waiters or self._grouped(state.pod):
            return
        if state.deleted or ended(state.pod):
            self._drop(name)

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

    # --- the informer's loop, whose requests are ListWatch's -------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            name = f"airflow-gpu-watch-{self.kind.plural}-{self.namespace}"
            self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def _record(self, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
        """A pod's new state, only what tells how it ended; kept while it exists, so that a trigger that
        comes after the list (a triggerer restart brings thousands over some seconds) needs no GET.

        Bounded: only the objects the informer selects (its label), dropped once gone unless a trigger
        waits on them, and an ended one ``ENDED_SECONDS`` after it ended (a relist does not bring it
        back unchanged)."""
        previous = self.states.get(name)
        last = pod if pod is not None else (previous.pod if previous else None)
        held = name in self.waiters or bool(self.groups and self._grouped(last))
        if deleted:
            self._expired.pop(name, None)
            if not held:
                self._ended.pop(name, None)
                self.states.pop(name, None)  # gone: a trigger that comes later hears it from its GET (404)
                return
        elif not held and pod is not None and self._expired.get(name) == resource_version(pod):
            return  # ended long ago, dropped, and unchanged since
        kept = slim(pod) if pod is not None else last
        self._counter += 1
        self.states[name] = PodState(kept, self._counter, deleted)
        self._expired.pop(name, None)
        if name not in self._ended and (deleted or ended(kept)):
            self._ended[name] = time.monotonic()
        self._expire()
        self._wake(name, kept)

    def _listed(self, names: set[str]) -> None:
        self._expired = {name: version for name, version in self._expired.items() if name in names}

    def _expire(self) -> None:
        """Drop the objects that ended ``ENDED_SECONDS`` ago and that no trigger waits on."""
        now = time.monotonic()
        while self._ended:
            name, since = next(iter(self._ended.items()))
            if now - since < ENDED_SECONDS:
                return
            del self._ended[name]
            state = self.states.get(name)
            if state is not None and name not in self.waiters and not self._grouped(state.pod):
                self._drop(name)  # else ``forget`` drops it when its trigger is done

    def _drop(self, name: str) -> None:
        state = self.states.pop(name, None)
        self._ended.pop(name, None)
        if state is not None and not state.deleted:  # it still exists: a relist brings it, unchanged
            self._expired[name] = resource_version(state.pod)

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

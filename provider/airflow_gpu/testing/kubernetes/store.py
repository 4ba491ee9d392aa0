"""The emulator's etcd: objects by kind, namespace and name, with resource versions and watches.

Every change gets the next global resourceVersion and is appended to a history, so a watch that
starts from a resourceVersion replays what it missed, as the real API server does. Only the
emulator's event loop touches the store. Controllers (the Job controller, the garbage collector)
``subscribe`` to every change, as informers do; a listener only queues work, it never changes the
store while being told of a change.

Objects are kept per kind, so listing pods never sorts the events. Each change is encoded to JSON
once, when it happens: that text is the history entry and what every watch sends, the object as it
was then. A deep copy per watch and per history entry costs several times as much, and with
10,000 pods those copies would be most of the emulator's time. The latest text of each object is
kept too: a paged LIST (``paging``) serves it, and hands it to the snapshots a change outdates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.testing.kubernetes.objects import already_exists, new_uid, not_found, timestamp
from airflow_gpu.testing.kubernetes.paging import (
    LATEST,
    MAX_SNAPSHOTS,
    SNAPSHOT_SECONDS,
    ExpiredContinue,
    Page,
    Snapshot,
    decode_token,
    page,
)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # plural, namespace ("" if cluster-scoped), name
#: What a watch event is of: (namespace or "", name, resourceVersion), without decoding its text.
Ref = tuple[str, str, int]
Listener = Callable[[str, str, Obj], None]  # (plural, ADDED|MODIFIED|DELETED, the stored object)


@dataclass(frozen=True)
class Resource:
    """A kind the emulator serves."""

    plural: str
    kind: str
    api_version: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0] if "/" in self.api_version else ""


RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        Resource("namespaces", "Namespace", "v1", False),
        Resource("nodes", "Node", "v1", False),
        Resource("pods", "Pod", "v1", True),
        Resource("events", "Event", "v1", True),
        Resource("services", "Service", "v1", True),
        Resource("configmaps", "ConfigMap", "v1", True),
        Resource("endpoints", "Endpoints", "v1", True),
        Resource("secrets", "Secret", "v1", True),
        Resource("serviceaccounts", "ServiceAccount", "v1", True),
        Resource("resourcequotas", "ResourceQuota", "v1", True),
        Resource("limitranges", "LimitRange", "v1", True),
        Resource("jobs", "Job", "batch/v1", True),
        # What rbac authorizes ServiceAccounts' requests by.
        Resource("roles", "Role", "rbac.authorization.k8s.io/v1", True),
        Resource("rolebindings", "RoleBinding", "rbac.authorization.k8s.io/v1", True),
        Resource("clusterroles", "ClusterRole", "rbac.authorization.k8s.io/v1", False),
        Resource("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", False),
    )
}


def encode(obj: Obj) -> str:
    """An object as the API sends it (compact JSON)."""
    return json.dumps(obj, separators=(",", ":"))


@dataclass
class Watch:
    plural: str
    namespace: str | None
    matches: Callable[[Obj], bool]
    #: (ADDED|MODIFIED|DELETED, the object as JSON text when it changed, what it is of); None ends the watch.
    queue: asyncio.Queue[tuple[str, str, Ref] | None] = field(default_factory=asyncio.Queue)


class Store:
    def __init__(self) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {plural: {} for plural in RESOURCES}
        #: Each object's JSON text as of its last change (what a paged LIST sends).
        self._encoded: dict[str, dict[tuple[str, str], str]] = {plural: {} for plural in RESOURCES}
        #: Paged LISTs' snapshots by (plural, resourceVersion), oldest first.
        self._snapshots: dict[tuple[str, int], Snapshot] = {}
        #: Pages of a LIST with a selector hold only the matches among ``limit`` keys (``paging``).
        self.short_pages = False
        self._version = 0
        #: (rv, plural, type, namespace or None, the object as JSON then, what it is of)
        self._history: list[tuple[int, str, str, str | None, str, Ref]] = []
        self._watches: list[Watch] = []
        self._listeners: list[Listener] = []
        self._recorders: list[Listener] = []  # listeners called before the watches (``subscribe``)

    def subscribe(self, listener: Listener, *, before_watches: bool = False) -> None:
        """Call ``listener`` after every change (the object itself: read it, do not keep or change it).

        ``before_watches``: call it before the watches are given the change, for a listener that only
        records (it must not write to the store, or its writes' events would reach the watches first):
        a client that reads the change from a watch then finds it recorded."""
        (self._recorders if before_watches else self._listeners).append(listener)

    @property
    def resource_version(self) -> str:
        return str(self._version)

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    def _notify(self, plural: str, event: str, obj: Obj) -> None:
        encoded = encode(obj)
        namespace = obj["metadata"].get("namespace")
        key = (namespace or "", obj["metadata"]["name"])
        texts = self._encoded[plural]
        for snapshot in self._snapshots.values():  # copy-on-write: the object as the snapshot saw it
            if snapshot.plural == plural and key not in snapshot.before:
                snapshot.before[key] = texts.get(key)
        if event == "DELETED":
            texts.pop(key, None)
        else:
            texts[key] = encoded
        ref = (key[0], key[1], self._version)
        self._history.append((self._version, plural, event, namespace, encoded, ref))
        if len(self._history) > 10_000:
            del self._history[:1_000]
        for recorder in self._recorders:
            recorder(plural, event, obj)
        for watch in self._watches:
            if watch.plural == plural and watch.namespace in (None, namespace) and watch.matches(obj):
                watch.queue.put_nowait((event, encoded, ref))
        for listener in self._listeners:
            listener(plural, event, obj)

    def get(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self._objects[plural].get((namespace, name))
        if obj is None:
            resource = RESOURCES[plural]
            raise not_found(resource.kind, plural, name, resource.group)
        return obj

    def find(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self._objects[plural].get((namespace, name))

    def list(
        self, plural: str, namespace: str | None = None, matches: Callable[[Obj], bool] | None = None
    ) -> list[Obj]:
        """The objects of one kind (in one namespace), ordered by namespace and name."""
        objects = self._objects[plural]
        keys = sorted(objects) if namespace is None else sorted(key for key in objects if key[0] == namespace)
        return [objects[key] for key in keys if matches is None or matches(objects[key])]

    def page(
        self,
        plural: str,
        namespace: str | None,
        matches: Callable[[Obj], bool] | None,
        limit: int,
        token: str | None,
    ) -> Page:
        """One page of a LIST with ``limit`` (and ``continue``): see ``paging``."""
        now, version = time.monotonic(), self._version
        for key, old in list(self._snapshots.items()):
            if now - old.created > SNAPSHOT_SECONDS or old.version < self.oldest_version:
                del self._snapshots[key]  # compacted
        after: tuple[str, str] | None = None
        if token is not None:
            version, after = decode_token(token)
            if version == LATEST:
                version = self._version
            elif version != self._version and (plural, version) not in self._snapshots:
                raise ExpiredContinue(after)
        snapshot = self._snapshots.get((plural, version))  # None: nothing changed since ``version``
        result = page(
            self._objects[plural], self._encoded[plural], snapshot, version, namespace, after, limit, matches,
            self.short_pages,
        )  # fmt: skip
        if result.next_key is not None and snapshot is None:  # the next page reads this version
            self._snapshots[(plural, version)] = Snapshot(plural, version)
            while len(self._snapshots) > MAX_SNAPSHOTS:
                del self._snapshots[next(iter(self._snapshots))]
        return result

    def create(self, plural: str, namespace: str, obj: Obj, keep_uid: bool = False) -> Obj:
        """Store a new object; ``keep_uid`` when the registry had to give it its uid before (a Job's
        generated selector names it)."""
        resource = RESOURCES[plural]
        metadata = obj.setdefault("metadata", {})
        name = metadata["name"]
        held = self._objects[plural].get((namespace, name))
        if held is not None:
            raise already_exists(plural, name, resource.group, bool(held["metadata"].get("deletionTimestamp")))
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.namespaced:
            metadata["namespace"] = namespace
        if not (keep_uid and metadata.get("uid")):
            metadata["uid"] = new_uid()
        metadata["creationTimestamp"] = timestamp()
        metadata["generation"] = 1
        metadata["resourceVersion"] = self._bump()
        self._objects[plural][(namespace, name)] = obj
        self._notify(plural, "ADDED", obj)
        return obj

    def update(self, plural: str, obj: Obj, spec_changed: bool = False) -> Obj:
        """Store a changed object (same key) and tell the watches."""
        metadata = obj["metadata"]
        key = (metadata.get("namespace", ""), metadata["name"])
        if key not in self._objects[plural]:
            raise not_found(RESOURCES[plural].kind, plural, metadata["name"], RESOURCES[plural].group)
        if spec_changed:
            metadata["generation"] = metadata.get("generation", 1) + 1
        metadata["resourceVersion"] = self._bump()
        self._objects[plural][key] = obj
        self._notify(plural, "MODIFIED", obj)
        return obj

    def remove(self, plural: str, namespace: str, name: str) -> Obj:
        obj = self.get(plural, namespace, name)
        del self._objects[plural][(namespace, name)]
        obj["metadata"]["resourceVersion"] = self._bump()
        self._notify(plural, "DELETED", obj)
        return obj

    @property
    def oldest_version(self) -> int:
        """The oldest resourceVersion a watch can still start from (older ones were compacted)."""
        return self._history[0][0] - 1 if self._history else self._version

    def compact(self) -> int:
        """Forget the history, as etcd compaction does: a watch from an older version gets 410 Gone."""
        self._history.clear()
        self._snapshots.clear()
        return self._version

    def too_old(self, since: str | None) -> bool:
        """Whether a watch from ``since`` would miss changes that are no longer kept."""
        return bool(since) and since != "0" and int(since or 0) < self.oldest_version

    def watch(self, plural: str, namespace: str | None, matches: Callable[[Obj], bool], since: str | None) -> Watch:
        """Start a watch; with ``since`` replay later history, else send the current objects as ADDED."""
        watch = Watch(plural, namespace, matches)
        if since and since != "0":
            for version, kind, event, obj_namespace, encoded, ref in self._history:
                in_scope = version > int(since) and kind == plural and namespace in (None, obj_namespace)
                if in_scope and matches(json.loads(encoded)):
                    watch.queue.put_nowait((event, encoded, ref))
        else:
            for obj in self.list(plural, namespace, matches):
                metadata = obj["metadata"]
                ref = (metadata.get("namespace") or "", metadata["name"], int(metadata["resourceVersion"]))
                watch.queue.put_nowait(("ADDED", encode(obj), ref))
        self._watches.append(watch)
        return watch

    def stop_watch(self, watch: Watch) -> None:
        if watch in self._watches:
            self._watches.remove(watch)
        watch.queue.put_nowait(None)

    def stop_all_watches(self) -> None:
        for watch in list(self._watches):
            self.stop_watch(watch)

    def labels(self, obj: Mapping[str, Any]) -> Mapping[str, str]:
        return obj.get("metadata", {}).get("labels") or {}

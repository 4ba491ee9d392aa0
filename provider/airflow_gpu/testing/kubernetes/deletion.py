"""Deletion as the API server and the garbage collector do it: options, finalizers, owner references.

A DELETE carries ``DeleteOptions`` (query parameters or a body): ``propagationPolicy`` (``Orphan``,
``Background``, ``Foreground``), the deprecated ``orphanDependents``, ``gracePeriodSeconds`` and
``preconditions``. As the generic registry store (``shouldOrphanDependents``,
``deletionFinalizersForGarbageCollection``) decides, ``Orphan`` adds the ``orphan`` finalizer and
``Foreground`` the ``foregroundDeletion`` finalizer; an object with finalizers left is only marked
(``deletionTimestamp``, ``deletionGracePeriodSeconds: 0``) and goes once they are all removed.
Each kind's strategy has a default policy: ``Background``, but ``Orphan`` for ``batch/v1`` Jobs
("for backwards compatibility", ``DefaultGarbageCollectionPolicy`` in the Job registry), the
well-known reason a Job deleted without a policy leaves its pods running.

The garbage collector then does the rest: orphaning removes the owner's references from its
dependents, background deletion deletes the dependents whose owners are all gone, foreground
deletion deletes the dependents and removes the owner once those that ``blockOwnerDeletion`` are
gone. Dependents are found by ``metadata.ownerReferences`` (uid), kept in an index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_gpu.testing.kubernetes.objects import ApiError, conflict, invalid, invalid_value, not_supported
from airflow_gpu.testing.kubernetes.store import RESOURCES, Key, Obj

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.cluster_state import ClusterState

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
GC_FINALIZERS = (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)
POLICIES = ("Foreground", "Background", "Orphan")
#: ``DefaultGarbageCollectionPolicy`` of the kinds that do not delete their dependents by default.
DEFAULT_POLICY = {"jobs": "Orphan"}
PLURAL_OF_KIND = {(r.api_version, r.kind): r.plural for r in RESOURCES.values()}


@dataclass(frozen=True)
class DeleteOptions:
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    grace_period_seconds: int | None = None
    preconditions: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, query: Mapping[str, str], body: Any) -> DeleteOptions:
        """From the query string and the ``DeleteOptions`` body; invalid options are 422, as
        ``ValidateDeleteOptions`` makes them."""
        options = body if isinstance(body, dict) else {}
        policy = query.get("propagationPolicy", options.get("propagationPolicy"))
        orphan: Any = query.get("orphanDependents", options.get("orphanDependents"))
        if isinstance(orphan, str):
            orphan = orphan.lower() in ("true", "1")
        grace: Any = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        causes = []
        if orphan is not None and policy is not None:
            detail = "orphanDependents and deletionPropagation cannot be both set"
            causes.append(invalid_value("propagationPolicy", policy, detail))
        if policy is not None and policy not in POLICIES:
            causes.append(not_supported("propagationPolicy", policy, [*POLICIES, "nil"]))
        if causes:
            raise invalid("DeleteOptions", "", causes, group="meta.k8s.io")
        try:
            grace_seconds = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise ApiError(400, "BadRequest", f"gracePeriodSeconds must be an integer, not {grace!r}") from None
        return cls(policy, orphan, grace_seconds, options.get("preconditions") or {})

    def check_preconditions(self, plural: str, obj: Obj) -> None:
        """409 Conflict when ``preconditions`` name another uid or resourceVersion."""
        metadata, group = obj["metadata"], RESOURCES[plural].group
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = self.preconditions.get(key)
            if wanted is not None and wanted != metadata.get(key):
                actual = metadata.get(key)
                message = f"Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                raise conflict(plural, metadata["name"], message, group)

    def orphans(self, plural: str, finalizers: list[str]) -> bool:
        """``shouldOrphanDependents``: the options, then the object's finalizers, then the kind's default."""
        if self.orphan_dependents is not None:
            return self.orphan_dependents
        if self.propagation_policy is not None:
            return self.propagation_policy == "Orphan"
        if ORPHAN_FINALIZER in finalizers:
            return True
        if FOREGROUND_FINALIZER in finalizers:
            return False
        return DEFAULT_POLICY.get(plural) == "Orphan"

    def foreground(self, finalizers: list[str]) -> bool:
        """``shouldDeleteDependents``."""
        if self.orphan_dependents is not None:
            return False
        if self.propagation_policy is not None:
            return self.propagation_policy == "Foreground"
        return FOREGROUND_FINALIZER in finalizers and ORPHAN_FINALIZER not in finalizers

    def finalizers(self, plural: str, current: list[str]) -> list[str]:
        """``deletionFinalizersForGarbageCollection``: the object's finalizers with the GC ones as asked."""
        kept = [f for f in current if f not in GC_FINALIZERS]
        if self.orphans(plural, current):
            kept.append(ORPHAN_FINALIZER)
        if self.foreground(current):
            kept.append(FOREGROUND_FINALIZER)
        return kept


def deletion_status(plural: str, obj: Obj) -> dict[str, Any]:
    """What a DELETE that removed the object at once answers for kinds that do not return it."""
    metadata = obj["metadata"]
    details = {"name": metadata["name"], "kind": plural, "uid": metadata.get("uid")}
    if RESOURCES[plural].group:
        details["group"] = RESOURCES[plural].group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def owner_plural(reference: Mapping[str, Any]) -> str | None:
    return PLURAL_OF_KIND.get((reference.get("apiVersion", ""), reference.get("kind", "")))


class GarbageCollector:
    """The garbage collector's three duties, driven by store events on the loop."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.dependents: dict[str, set[Key]] = {}  # owner uid -> dependent keys
        self._owners: dict[Key, tuple[str, ...]] = {}  # dependent key -> owner uids
        self._work: list[tuple[str, Any]] = []
        self._scheduled = False
        state.store.subscribe(self._observe)

    # --- the index and the events ---------------------------------------------------------

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        metadata = obj["metadata"]
        key: Key = (plural, metadata.get("namespace", ""), metadata["name"])
        references = metadata.get("ownerReferences") or ()
        before = set(self._owners.get(key, ()))
        if references or key in self._owners:
            self._index(key, () if event == "DELETED" else tuple(r.get("uid", "") for r in references))
        if event == "DELETED":
            if metadata.get("uid") in self.dependents:
                self._queue("owner-gone", (metadata["uid"], key))
            for reference in references:  # an owner in foreground deletion may be waiting for this one
                self._queue("finalize-owner", (key[1], reference))
            return
        finalizers = metadata.get("finalizers") or ()
        if metadata.get("deletionTimestamp") and any(f in GC_FINALIZERS for f in finalizers):
            self._queue("finalize", key)
        elif references and (event == "ADDED" or {r.get("uid", "") for r in references} - before):
            # an owner added by an update is looked up as one given at creation is (the graph builder's
            # ``addDependentToOwners``: an owner not in the graph is a virtual node, verified, and when it does not
            # exist its dependents are deleted): a Service patched to a Job deleted meanwhile goes
            self._queue("check-owners", key)

    def _index(self, key: Key, owners: tuple[str, ...]) -> None:
        for uid in self._owners.pop(key, ()):
            keys = self.dependents.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.dependents[uid]
        if owners:
            self._owners[key] = owners
            for uid in owners:
                self.dependents.setdefault(uid, set()).add(key)

    def _queue(self, what: str, detail: Any) -> None:
        self._work.append((what, detail))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        work, self._work = self._work, []
        for what, detail in work:
            if what == "owner-gone":
                self._collect_dependents_of(*detail)
            elif what == "finalize":
                self._finalize(detail)
            elif what == "finalize-owner":
                namespace, reference = detail
                plural = owner_plural(reference)
                owner = self.state.store.find(plural, namespace, reference.get("name", "")) if plural else None
                if plural is not None and owner is not None and owner["metadata"].get("uid") == reference.get("uid"):
                    metadata = owner["metadata"]
                    self._finalize((plural, metadata.get("namespace", ""), metadata["name"]))
            elif what == "check-owners":
                self._collect_if_orphaned(detail)

    # --- the duties ---------------------------------------------------------------------------

    def _live_owner(self, namespace: str, reference: Mapping[str, Any]) -> bool | None:
        """True if the owner exists with that uid, False if it is gone, None for a kind not served."""
        plural = owner_plural(reference)
        if plural is None:
            return None
        owner_namespace = namespace if RESOURCES[plural].namespaced else ""
        owner = self.state.store.find(plural, owner_namespace, reference.get("name", ""))
        return owner is not None and owner["metadata"].get("uid") == reference.get("uid")

    def _collect_if_orphaned(self, key: Key) -> None:
        """Background collection: delete a dependent whose owners are all gone; drop dangling
        references from one that still has a live owner (``attemptToDeleteItem``)."""
        obj = self.state.store.find(*key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        references = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in references if self._live_owner(key[1], r) is not False]
        if not alive:
            finalizers = obj["metadata"].get("finalizers") or []
            policy = (
                "Orphan"
                if ORPHAN_FINALIZER in finalizers
                else "Foreground"
                if FOREGROUND_FINALIZER in finalizers
                else "Background"
            )
            self.state.delete_object(key[0], key[1], key[2], DeleteOptions(propagation_policy=policy))
        elif len(alive) != len(references):
            obj["metadata"]["ownerReferences"] = alive
            self.state.store.update(key[0], obj)

    def _collect_dependents_of(self, uid: str, owner_key: Key) -> None:
        for key in sorted(self.dependents.get(uid, ())):
            self._collect_if_orphaned(key)

    def _finalize(self, key: Key) -> None:
        """An owner being deleted with the ``orphan`` or ``foregroundDeletion`` finalizer."""
        owner = self.state.store.find(*key)
        if owner is None or not owner["metadata"].get("deletionTimestamp"):
            return
        metadata = owner["metadata"]
        uid, finalizers = metadata.get("uid", ""), metadata.get("finalizers") or []
        dependents = [d for d in (self.state.store.find(*k) for k in sorted(self.dependents.get(uid, ()))) if d]
        if ORPHAN_FINALIZER in finalizers:
            for dependent in dependents:  # orphanDependents: drop the references to this owner
                references = dependent["metadata"].get("ownerReferences") or []
                dependent["metadata"]["ownerReferences"] = [r for r in references if r.get("uid") != uid]
                if not dependent["metadata"]["ownerReferences"]:
                    del dependent["metadata"]["ownerReferences"]
                self.state.store.update(_plural(dependent), dependent)
            self.state.remove_finalizer(key[0], owner, ORPHAN_FINALIZER)
            return
        if FOREGROUND_FINALIZER in finalizers:
            for dependent in dependents:
                if not dependent["metadata"].get("deletionTimestamp"):
                    name = dependent["metadata"]["name"]
                    self.state.delete_object(
                        _plural(dependent), key[1], name, DeleteOptions(propagation_policy="Background")
                    )
            blocking = [
                d
                for d in dependents
                if self.state.store.find(_plural(d), key[1], d["metadata"]["name"]) is d
                and any(
                    r.get("uid") == uid and r.get("blockOwnerDeletion")
                    for r in d["metadata"].get("ownerReferences") or []
                )
            ]
            if not blocking:
                self.state.remove_finalizer(key[0], owner, FOREGROUND_FINALIZER)


def _plural(obj: Obj) -> str:
    return PLURAL_OF_KIND[(obj["apiVersion"], obj["kind"])]

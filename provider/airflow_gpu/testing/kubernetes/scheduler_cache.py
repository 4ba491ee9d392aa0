"""kube-scheduler's cache: what each node has in use, with nodes grouped by shape, kept by the store's events.

``scheduler.schedule`` is the definition of a decision: for one pending pod it reads every node and,
for each node, every pod, so a pass over 10,000 pods on 2,000 nodes takes hours. This cache gives the
same decision (the node, or the same ``FailedScheduling`` message) from state it keeps up to date as
objects change, the way the real scheduler's cache follows its informers:

* per node, what the bound pods that have not ended request (in nano-units, as integers: adding and
  removing a pod's requests leaves no rounding behind);
* nodes grouped by *shape*, everything the filters read except the node's name: labels other than
  ``kubernetes.io/hostname``, the taints' key, value and effect, ``unschedulable`` and allocatable.
  Within a shape, nodes are grouped again by what they have in use.

A pending pod is then filtered once per shape (cordon, taints, node affinity) and once per group of
nodes with the same use (resources), and the groups give every node's reason by their size. A pod
whose selector or affinity reads the node's name (``kubernetes.io/hostname``, ``matchFields``) is
matched node by node within its shape's groups; it is rare, and still exact.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.accelerators.kubernetes import pod_requests
from airflow_gpu.accelerators.quantities import parse_quantity
from airflow_gpu.testing.kubernetes.scheduler import matches_affinity, untolerated_taint
from airflow_gpu.testing.kubernetes.store import Obj, Store

HOSTNAME_LABEL = "kubernetes.io/hostname"
ENDED = ("Succeeded", "Failed")
#: A node's resources as a hashable value: ((resource, nano-units), ...) sorted, zeros left out.
Amounts = tuple[tuple[str, int], ...]
ShapeKey = tuple[frozenset[tuple[str, str]], tuple[tuple[Any, Any, Any], ...], bool, Amounts]


def nano(amount: float) -> int:
    """A quantity in nano-units (``1`` is 10^-9 of the resource's unit), the finest a quantity says."""
    return round(amount * 1e9)


def _amounts(values: Mapping[str, int]) -> Amounts:
    return tuple(sorted((resource, amount) for resource, amount in values.items() if amount))


def _shape_key(node: Mapping[str, Any]) -> ShapeKey:
    spec = node.get("spec") or {}
    labels = (node["metadata"].get("labels") or {}).items()
    taints = tuple((t.get("key"), t.get("value"), t.get("effect")) for t in spec.get("taints") or [])
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return (
        frozenset((key, value) for key, value in labels if key != HOSTNAME_LABEL),
        taints,
        bool(spec.get("unschedulable")),
        _amounts({resource: nano(float(parse_quantity(v))) for resource, v in allocatable.items()}),
    )


def reads_node_name(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's node selector or required node affinity looks at the node's own name."""
    spec = pod.get("spec") or {}
    if HOSTNAME_LABEL in (spec.get("nodeSelector") or {}):
        return True
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return any(
        term.get("matchFields") or any(e.get("key") == HOSTNAME_LABEL for e in term.get("matchExpressions") or [])
        for term in affinity.get("nodeSelectorTerms") or []
    )


@dataclass
class _Shape:
    """Nodes alike in everything the filters read but their names."""

    allocatable: dict[str, int]
    nodes: dict[str, Obj] = field(default_factory=dict)  # name -> the stored node
    groups: dict[Amounts, list[str]] = field(default_factory=dict)  # in use -> node names, sorted

    @property
    def node(self) -> Obj:
        """Any of its nodes: they differ only in their names."""
        return next(iter(self.nodes.values()))


@dataclass
class _Bound:
    """What a bound pod that has not ended takes from its node."""

    uid: str
    generation: int
    node: str
    requests: dict[str, int]


class SchedulerCache:
    """Nodes by shape and use, pods' requests by node, and the pods waiting for a node."""

    def __init__(self, store: Store) -> None:
        self._shapes: dict[ShapeKey, _Shape] = {}
        self._where: dict[str, tuple[ShapeKey, Amounts]] = {}  # node name -> its shape and use
        self._used: dict[str, dict[str, int]] = {}  # node name -> in use (kept for a node not there too)
        self._bound: dict[tuple[str, str], _Bound] = {}
        #: Pods with no node, ``Pending``, not being deleted: what a scheduling pass looks at.
        self.pending: set[tuple[str, str]] = set()
        for node in store.list("nodes"):
            self._node_changed(node)
        for pod in store.list("pods"):
            self._pod_changed(pod, deleted=False)
        store.subscribe(self._observe)

    # --- following the store --------------------------------------------------------------

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        if plural == "pods":
            self._pod_changed(obj, deleted=event == "DELETED")
        elif plural == "nodes":
            if event == "DELETED":
                self._node_removed(obj["metadata"]["name"])
            else:
                self._node_changed(obj)

    def _pod_changed(self, pod: Obj, deleted: bool) -> None:
        metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        key = (metadata.get("namespace", ""), metadata["name"])
        node, phase = spec.get("nodeName"), status.get("phase")
        if not deleted and not node and phase == "Pending" and not metadata.get("deletionTimestamp"):
            self.pending.add(key)
        else:
            self.pending.discard(key)
        before = self._bound.get(key)
        if deleted or not node or phase in ENDED:
            if before is not None:
                del self._bound[key]
                self._use(before.node, before.requests, -1)
            return
        uid, generation = str(metadata.get("uid")), int(metadata.get("generation") or 1)
        if before is not None and (before.uid, before.generation, before.node) == (uid, generation, node):
            return
        if before is not None:
            self._use(before.node, before.requests, -1)
        requests = {resource: nano(amount) for resource, amount in pod_requests(pod).items()}
        self._bound[key] = _Bound(uid, generation, node, requests)
        self._use(node, requests, +1)

    def _use(self, node: str, requests: Mapping[str, int], sign: int) -> None:
        used = self._used.setdefault(node, {})
        for resource, amount in requests.items():
            used[resource] = used.get(resource, 0) + sign * amount
        where = self._where.get(node)
        if where is not None:
            self._move(node, where[0], where[1], _amounts(used))

    def _node_changed(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        key = _shape_key(node)
        where = self._where.get(name)
        if where is not None and where[0] != key:
            self._node_removed(name)
            where = None
        shape = self._shapes.get(key)
        if shape is None:
            allocatable = dict(key[3])
            shape = self._shapes[key] = _Shape(allocatable)
        shape.nodes[name] = node  # the object stored now (an update may replace it)
        if where is None:
            used = _amounts(self._used.get(name, {}))
            bisect.insort(shape.groups.setdefault(used, []), name)
            self._where[name] = (key, used)

    def _node_removed(self, name: str) -> None:
        where = self._where.pop(name, None)
        if where is None:
            return
        key, used = where
        shape = self._shapes[key]
        del shape.nodes[name]
        self._drop(shape, used, name)
        if not shape.nodes:
            del self._shapes[key]

    def _move(self, name: str, key: ShapeKey, old: Amounts, new: Amounts) -> None:
        if old == new:
            return
        shape = self._shapes[key]
        self._drop(shape, old, name)
        bisect.insort(shape.groups.setdefault(new, []), name)
        self._where[name] = (key, new)

    @staticmethod
    def _drop(shape: _Shape, used: Amounts, name: str) -> None:
        names = shape.groups[used]
        del names[bisect.bisect_left(names, name)]
        if not names:
            del shape.groups[used]

    # --- a decision -----------------------------------------------------------------------

    def schedule(self, pod: Mapping[str, Any]) -> tuple[str | None, str]:
        """``scheduler.schedule``'s answer for ``pod``, from the cache."""
        requested = {resource: nano(amount) for resource, amount in pod_requests(pod).items()}
        wanted = sorted((resource, amount) for resource, amount in requested.items() if amount > 0)
        extended = [resource for resource in requested if "/" in resource]
        by_name = reads_node_name(pod)
        counts: Counter[str] = Counter()
        best: tuple[int, str] | None = None
        for shape in self._shapes.values():
            size, node = len(shape.nodes), shape.node
            if (node.get("spec") or {}).get("unschedulable"):
                counts["node(s) were unschedulable"] += size
                continue
            taint = untolerated_taint(pod, node)
            if taint is not None:
                counts[f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"] += size
                continue
            if not by_name and not matches_affinity(pod, node):
                counts["node(s) didn't match Pod's node affinity/selector"] += size
                continue
            allocatable = shape.allocatable
            for used_amounts, names in shape.groups.items():
                matching = names
                if by_name:
                    matching = [name for name in names if matches_affinity(pod, shape.nodes[name])]
                    if len(matching) < len(names):
                        counts["node(s) didn't match Pod's node affinity/selector"] += len(names) - len(matching)
                    if not matching:
                        continue
                used = dict(used_amounts)
                reasons = [
                    "Too many pods" if resource == "pods" else f"Insufficient {resource}"
                    for resource, amount in wanted
                    if amount + used.get(resource, 0) > allocatable.get(resource, 0)
                ]
                if reasons:
                    for reason in reasons:
                        counts[reason] += len(matching)
                    continue
                spare = sum(allocatable.get(r, 0) - used.get(r, 0) - requested[r] for r in extended)
                candidate = (spare, matching[0])  # the first name: the group's names are sorted
                if best is None or candidate < best:
                    best = candidate
        if best is not None:
            return best[1], ""
        total = len(self._where)
        details = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))
        return None, f"0/{total} nodes are available: {details}." if details else f"0/{total} nodes are available."

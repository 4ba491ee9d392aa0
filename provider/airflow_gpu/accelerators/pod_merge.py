"""A user's pod settings added to the GPU placement's, as Kubernetes API dicts.

A user who passes ``tolerations`` for their own taint must not lose the GPU and spot tolerations
(the pod would never schedule), nor ``/dev/shm`` by adding a volume. So every list adds up and the
user wins only where both set the same thing: the same resource, the same toleration key and
effect, the same volume name or mount path, the same node-affinity key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]


def merge_resources(gpu: Mapping[str, Any], user: Mapping[str, Any] | None) -> Obj:
    """Requests and limits per resource name; a name the user sets (request or limit) is entirely
    the user's, so a request can never end up above its limit (the API server refuses that)."""
    user = user or {}
    theirs = {*(user.get("requests") or {}), *(user.get("limits") or {})}
    merged: Obj = {}
    for part in ("requests", "limits"):
        values = {k: v for k, v in (gpu.get(part) or {}).items() if k not in theirs}
        values.update(user.get(part) or {})
        if values:
            merged[part] = values
    claims = [*(gpu.get("claims") or []), *(user.get("claims") or [])]
    if claims:
        merged["claims"] = claims
    return merged


def merge_tolerations(gpu: Sequence[Mapping[str, Any]], user: Sequence[Mapping[str, Any]] | None) -> list[Obj]:
    """All tolerations; a user toleration replaces the GPU one with the same key and effect."""
    taken = {(t.get("key"), t.get("effect")) for t in user or []}
    return [*(dict(t) for t in gpu if (t.get("key"), t.get("effect")) not in taken), *(dict(t) for t in user or [])]


def merge_volumes(gpu: Sequence[Mapping[str, Any]], user: Sequence[Mapping[str, Any]] | None) -> list[Obj]:
    """All volumes; a user volume replaces the GPU one of the same name."""
    taken = {v.get("name") for v in user or []}
    return [*(dict(v) for v in gpu if v.get("name") not in taken), *(dict(v) for v in user or [])]


def merge_mounts(gpu: Sequence[Mapping[str, Any]], user: Sequence[Mapping[str, Any]] | None) -> list[Obj]:
    """All mounts; a user mount replaces the GPU one at the same path or of the same volume."""
    paths = {m.get("mountPath") for m in user or []}
    names = {m.get("name") for m in user or []}
    kept = [dict(m) for m in gpu if m.get("mountPath") not in paths and m.get("name") not in names]
    return [*kept, *(dict(m) for m in user or [])]


def _terms(affinity: Mapping[str, Any] | None) -> list[Obj]:
    node = (affinity or {}).get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [dict(t) for t in required.get("nodeSelectorTerms") or []]


def _and(gpu: Mapping[str, Any], user: Mapping[str, Any]) -> Obj:
    """One term that needs both: the user's expression wins for a key both constrain."""
    term: Obj = {}
    for part in ("matchExpressions", "matchFields"):
        theirs = list(user.get(part) or [])
        keys = {e.get("key") for e in theirs}
        mine = [e for e in gpu.get(part) or [] if e.get("key") not in keys]
        if mine or theirs:
            term[part] = [*mine, *theirs]
    return term


def merge_affinity(gpu: Mapping[str, Any] | None, user: Mapping[str, Any] | None) -> Obj | None:
    """The GPU node affinity AND the user's; preferences add up; pod (anti-)affinity is the user's.

    Required node-selector terms are ORed by Kubernetes, their expressions ANDed: the merged terms
    are every (GPU term, user term) pair joined, so each still requires the GPU.
    """
    if not user:
        return dict(gpu) if gpu else None
    if not gpu:
        return dict(user)
    merged: Obj = {k: v for k, v in user.items() if k != "nodeAffinity"}
    gpu_terms, user_terms = _terms(gpu), _terms(user)
    terms = [_and(g, u) for g in gpu_terms for u in user_terms] if gpu_terms and user_terms else gpu_terms or user_terms
    preferred = [
        *((gpu.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []),
        *((user.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []),
    ]
    node: Obj = {}
    if terms:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if preferred:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    if node:
        merged["nodeAffinity"] = node
    return merged

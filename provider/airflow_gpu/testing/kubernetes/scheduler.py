"""Which node a pod can run on, with the reasons the real scheduler gives when none can.

Filters, in the order kube-scheduler's default plugins run: node unschedulable (cordoned), taints
the pod does not tolerate, node selector and required node affinity, then resources (requests against
allocatable minus what running pods requested). The first failing filter is a node's reason; a pod
that fits nowhere gets kube-scheduler's message, e.g.
``0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 Insufficient nvidia.com/gpu.``

``schedule`` is the definition, read straight from the nodes and pods. The emulator decides through
``scheduler_cache.SchedulerCache``, which gives the same answers from state kept up to date by the
store's events, at a cost per kind of node rather than per node and pod; a property test
(``tests/testing/kubernetes/test_scheduler_cache.py``) holds the two together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_gpu.accelerators.kubernetes import pod_requests
from airflow_gpu.accelerators.quantities import parse_quantity

Obj = dict[str, Any]
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    value = labels.get(key) if isinstance(key, str) else None
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term matches no objects
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(e, fields) for e in field_expressions
    )


def matches_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if required:
        return any(_term_matches(term, node) for term in required)
    return True


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    taints: list[Mapping[str, Any]] = (node.get("spec") or {}).get("taints") or []
    return next((t for t in taints if t.get("effect") in SCHEDULING_EFFECTS and not tolerates(tolerations, t)), None)


def used_on(node_name: str, pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    used: dict[str, float] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if (pod.get("spec") or {}).get("nodeName") == node_name and phase not in ("Succeeded", "Failed"):
            for resource, amount in pod_requests(pod).items():
                used[resource] = used.get(resource, 0.0) + amount
    return used


def node_reasons(pod: Mapping[str, Any], node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why ``pod`` cannot go to ``node``; empty when it can."""
    if (node.get("spec") or {}).get("unschedulable"):
        return ["node(s) were unschedulable"]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"]
    if not matches_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    allocatable = {k: float(parse_quantity(v)) for k, v in (node.get("status") or {}).get("allocatable", {}).items()}
    used = used_on(node["metadata"]["name"], pods)
    reasons = []
    for resource, amount in sorted(pod_requests(pod).items()):
        if amount <= 0:
            continue
        if amount + used.get(resource, 0.0) > allocatable.get(resource, 0.0) + 1e-9:
            reasons.append("Too many pods" if resource == "pods" else f"Insufficient {resource}")
    return reasons


def schedule(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> tuple[str | None, str]:
    """The chosen node's name (or None) and, when none fits, kube-scheduler's message.

    Among nodes that fit, the one with the most free units of the pod's scarcest extended resource
    loses to the one with the least (bin packing keeps whole GPU nodes free), then by name.
    """
    fitting, counts = [], Counter[str]()
    for node in nodes:
        reasons = node_reasons(pod, node, pods)
        if reasons:
            counts.update(reasons)
        else:
            fitting.append(node)
    if fitting:

        def free_after(node: Mapping[str, Any]) -> tuple[float, str]:
            allocatable = {k: float(parse_quantity(v)) for k, v in node["status"]["allocatable"].items()}
            used = used_on(node["metadata"]["name"], pods)
            requested = pod_requests(pod)
            extended = [r for r in requested if "/" in r]
            spare = sum(allocatable.get(r, 0) - used.get(r, 0.0) - requested[r] for r in extended)
            return (spare, node["metadata"]["name"])

        return min(fitting, key=free_after)["metadata"]["name"], ""
    details = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))
    return (
        None,
        f"0/{len(nodes)} nodes are available: {details}." if details else f"0/{len(nodes)} nodes are available.",
    )

"""Multi-node parallel (MNP) node properties as AWS Batch validates and resolves them.

A ``multinode`` job definition carries ``nodeProperties`` ``{numNodes, mainNode,
nodeRangeProperties[{targetNodes, container}]}``; SubmitJob may bring ``nodeOverrides``
``{numNodes, nodePropertyOverrides[{targetNodes, containerOverrides}]}``. This module checks both the
way the Batch API reference and User Guide state the rules, and works out what each node runs.
It is pure: each check returns the ``ClientException`` message (``patches.py`` raises it) or None.

The rules and where they are written:

* ``NodeRangeProperty.targetNodes``: "A range of 0:3 indicates nodes with index values of 0 through 3.
  If the starting range value is omitted (:n), then 0 is used to start the range. If the ending range
  value is omitted (n:), then the highest possible node index is used to end the range. Your
  accumulative node ranges must account for all nodes (0:n). You can nest node ranges (for example,
  0:10 and 4:5). In this case, the 4:5 range properties override the 0:10 properties." Ranges that
  overlap without one holding the other are not described anywhere: refused here (stricter than, or
  as strict as, AWS).
* ``NodeProperties.mainNode``: "This node index value must be fewer than the number of nodes."
* "Node groups": "You can use AWS Batch to specify up to five distinct node groups for each job" and
  "Currently all node groups in a multi-node parallel job must use the same instance type";
  ``NodeRangeProperty.instanceTypes``: "this list object is currently limited to one element."
* ``RegisterJobDefinition.type``: "If the value is multinode, then nodeProperties is required. If the
  job is run on Fargate resources, then multinode isn't supported." ("AWS Fargate doesn't support
  multi-node parallel jobs", "Create a multi-node parallel job definition".) ``NodeProperties``: "Node
  properties can't be specified for Amazon EKS based job definitions."
* ``NodeOverrides.numNodes``: "There must be at least one node range in your job definition that has
  an open upper boundary, such as : or n:. The lower boundary of the node range that's specified in
  the job definition must be fewer than the number of nodes specified in the override. The main node
  index that's specified in the job definition must be fewer than the number of nodes specified in
  the override."
* ``nodePropertyOverrides[].targetNodes`` must name one of the job definition's ranges as written:
  AWS answers otherwise with "NodeOverride targets should match job definition. Non matching targets -
  0:0,1:1" (the exact text reported in aws/aws-parallelcluster#964 and Netflix/metaflow#1656;
  Metaflow registers its ranges "0:0" and "1:n" for that reason). An override applies to the nodes
  whose container comes from the range it names.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_NODE_GROUPS = 5  # "up to five distinct node groups for each job"
NON_MATCHING_TARGETS = "NodeOverride targets should match job definition. Non matching targets - {targets}"


@dataclass(frozen=True)
class NodeRange:
    """One ``targetNodes`` range with its bounds resolved against ``numNodes`` (both ends inclusive)."""

    target: str
    first: int
    last: int
    open_ended: bool

    def holds(self, other: NodeRange) -> bool:
        return self.first <= other.first and other.last <= self.last

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self.first <= index <= self.last


@dataclass(frozen=True)
class NodePlan:
    """What one node runs: its range's container and the overrides SubmitJob sent to that range."""

    index: int
    target: str
    container: Mapping[str, Any]
    overrides: Mapping[str, Any] = field(default_factory=dict)


def parse_target(target: object, num_nodes: int) -> NodeRange | str:
    """``"n:m"``, ``"n:"``, ``":m"`` or ``":"`` resolved for ``num_nodes`` nodes, or what is wrong with it."""
    if not isinstance(target, str) or target.count(":") != 1:
        return f"targetNodes {target!r} must be a range of node indexes such as 0:3, 1: or :2"
    start, end = target.split(":")
    if not all(part == "" or part.isdigit() for part in (start, end)):
        return f"targetNodes {target!r} must be a range of node indexes such as 0:3, 1: or :2"
    first = int(start) if start else 0
    last = int(end) if end else num_nodes - 1
    if first > last:
        return f"targetNodes {target!r} starts after it ends"
    if first >= num_nodes or (end and last >= num_nodes):
        return f"targetNodes {target!r} names a node index beyond numNodes {num_nodes} (indexes 0..{num_nodes - 1})"
    return NodeRange(target, first, last, open_ended=not end)


def _ranges(properties: Mapping[str, Any]) -> list[NodeRange] | str:
    num_nodes = properties.get("numNodes")
    main_node = properties.get("mainNode")
    if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
        return "nodeProperties.numNodes must be an integer of at least 1"
    if not isinstance(main_node, int) or isinstance(main_node, bool) or not 0 <= main_node < num_nodes:
        return f"nodeProperties.mainNode must be fewer than the number of nodes ({num_nodes}), got {main_node!r}"
    entries = properties.get("nodeRangeProperties")
    if not isinstance(entries, list) or not entries:
        return "nodeProperties.nodeRangeProperties must list at least one node range"
    if len(entries) > MAX_NODE_GROUPS:
        return (
            f"nodeProperties.nodeRangeProperties has {len(entries)} node groups; "
            f"AWS Batch allows up to {MAX_NODE_GROUPS}"
        )
    ranges: list[NodeRange] = []
    for entry in entries:
        parsed = parse_target(entry.get("targetNodes") if isinstance(entry, Mapping) else None, num_nodes)
        if isinstance(parsed, str):
            return parsed
        ranges.append(parsed)
    for i, one in enumerate(ranges):
        for other in ranges[i + 1 :]:
            if one.first == other.first and one.last == other.last:
                return f"targetNodes {one.target!r} and {other.target!r} name the same nodes"
            overlap = one.first <= other.last and other.first <= one.last
            if overlap and not (one.holds(other) or other.holds(one)):
                return (
                    f"targetNodes {one.target!r} and {other.target!r} overlap without one holding the other: "
                    "node ranges may only be nested (for example 0:10 and 4:5)"
                )
    missing = [i for i in range(num_nodes) if not any(i in r for r in ranges)]
    if missing:
        return f"node ranges must account for all nodes (0:{num_nodes - 1}); no range holds node(s) {missing}"
    return ranges


def _check_container(index: int, entry: Mapping[str, Any]) -> str | None:
    where = f"nodeProperties.nodeRangeProperties[{index}]"
    container = entry.get("container")
    if not isinstance(container, Mapping):
        if entry.get("ecsProperties") or entry.get("eksProperties"):
            return (
                f"{where}: the Batch emulator runs node ranges with a container only (no ecsProperties, eksProperties)"
            )
        return f"{where}.container must be provided"
    if not container.get("image"):
        return f"{where}.container must contain image"
    requirements = {r.get("type"): r.get("value") for r in container.get("resourceRequirements") or []}
    if container.get("vcpus") is None and requirements.get("VCPU") is None:
        return f"{where}.container must contain vcpus (a VCPU resourceRequirement)"
    if container.get("memory") is None and requirements.get("MEMORY") is None:
        return f"{where}.container must contain memory (a MEMORY resourceRequirement)"
    types = entry.get("instanceTypes")
    if types is not None and (not isinstance(types, list) or len(types) != 1):
        return f"{where}.instanceTypes is limited to one element"
    return None


def validate_definition(
    job_type: str | None,
    node_properties: Mapping[str, Any] | None,
    container_properties: Mapping[str, Any] | None,
    eks_properties: Mapping[str, Any] | None,
    platform_capabilities: Sequence[str] | None,
) -> str | None:
    """What RegisterJobDefinition refuses about a job definition's node properties, or None."""
    if job_type != "multinode":
        if node_properties is not None:
            return "nodeProperties are for multi-node parallel jobs: register the job definition with type multinode"
        return None
    if "FARGATE" in (platform_capabilities or []):
        return "multinode isn't supported on Fargate resources: platformCapabilities must be EC2"
    if eks_properties is not None:
        return "Node properties can't be specified for Amazon EKS based job definitions"
    if node_properties is None:
        return "nodeProperties must be provided for a multinode job definition"
    if container_properties is not None:
        return (
            "containerProperties can't be specified for a multinode job definition: "
            "give each node range its container in nodeProperties.nodeRangeProperties"
        )
    ranges = _ranges(node_properties)
    if isinstance(ranges, str):
        return ranges
    entries = node_properties["nodeRangeProperties"]
    for i, entry in enumerate(entries):
        problem = _check_container(i, entry)
        if problem:
            return problem
    chosen = {t for entry in entries for t in entry.get("instanceTypes") or []}
    if len(chosen) > 1:
        return f"all node groups in a multi-node parallel job must use the same instance type, got {sorted(chosen)}"
    return None


def effective_num_nodes(node_properties: Mapping[str, Any], node_overrides: Mapping[str, Any] | None) -> int:
    override = (node_overrides or {}).get("numNodes")
    return int(override if override is not None else node_properties["numNodes"])


def validate_overrides(node_properties: Mapping[str, Any], node_overrides: Mapping[str, Any] | None) -> str | None:
    """What SubmitJob refuses about ``nodeOverrides`` for a job definition's ``nodeProperties``, or None."""
    if not node_overrides:
        return None
    defined = {entry["targetNodes"] for entry in node_properties["nodeRangeProperties"]}
    targets = [str(o.get("targetNodes")) for o in node_overrides.get("nodePropertyOverrides") or []]
    unmatched = [t for t in targets if t not in defined]
    if unmatched:
        return NON_MATCHING_TARGETS.format(targets=",".join(unmatched))
    if len(set(targets)) != len(targets):
        return "nodePropertyOverrides names a node range more than once"
    num_nodes = node_overrides.get("numNodes")
    if num_nodes is None:
        return None
    if not isinstance(num_nodes, int) or num_nodes < 1:
        return "nodeOverrides.numNodes must be an integer of at least 1"
    if not any(str(t).endswith(":") for t in defined):
        return (
            "nodeOverrides.numNodes needs a node range in the job definition with an open upper boundary "
            "(such as : or n:)"
        )
    if node_properties["mainNode"] >= num_nodes:
        return (
            f"nodeOverrides.numNodes {num_nodes} must be more than the job definition's main node index "
            f"{node_properties['mainNode']}"
        )
    for target in sorted(defined):
        start = target.split(":")[0]
        if start and int(start) >= num_nodes:
            return (
                f"nodeOverrides.numNodes {num_nodes} must be more than the lower boundary of the job "
                f"definition's node range {target!r}"
            )
    resolved = _ranges({**node_properties, "numNodes": num_nodes})
    return resolved if isinstance(resolved, str) else None


def plan(node_properties: Mapping[str, Any], node_overrides: Mapping[str, Any] | None) -> list[NodePlan]:
    """One ``NodePlan`` per node of a valid job: the innermost range holding a node gives its container."""
    num_nodes = effective_num_nodes(node_properties, node_overrides)
    ranges = _ranges({**node_properties, "numNodes": num_nodes})
    assert not isinstance(ranges, str), ranges  # validated at RegisterJobDefinition and SubmitJob
    entries = node_properties["nodeRangeProperties"]
    overrides = {
        o["targetNodes"]: dict(o.get("containerOverrides") or {})
        for o in (node_overrides or {}).get("nodePropertyOverrides") or []
    }
    plans = []
    for index in range(num_nodes):
        holding = [(r, e) for r, e in zip(ranges, entries, strict=True) if index in r]
        governing, entry = min(holding, key=lambda pair: pair[0].last - pair[0].first)
        plans.append(NodePlan(index, governing.target, entry["container"], overrides.get(governing.target, {})))
    return plans


def instance_type(node_properties: Mapping[str, Any]) -> str | None:
    """The one instance type the node ranges ask for, if any does."""
    for entry in node_properties["nodeRangeProperties"]:
        for name in entry.get("instanceTypes") or []:
            return str(name)
    return None


def merge_container(container: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A range's container as its overrides change it: ``command`` replaced, ``environment`` and
    ``resourceRequirements`` merged by name and type (the way ``ContainerOverrides`` apply)."""
    merged = copy.deepcopy(dict(container))
    if overrides.get("command") is not None:
        merged["command"] = list(overrides["command"])
    if overrides.get("environment"):
        env = {e["name"]: e["value"] for e in merged.get("environment") or []}
        env.update({e["name"]: e["value"] for e in overrides["environment"]})
        merged["environment"] = [{"name": k, "value": v} for k, v in env.items()]
    if overrides.get("resourceRequirements"):
        wanted = {r["type"]: r["value"] for r in merged.get("resourceRequirements") or []}
        wanted.update({r["type"]: r["value"] for r in overrides["resourceRequirements"]})
        merged["resourceRequirements"] = [{"type": k, "value": v} for k, v in wanted.items()]
    for key in ("vcpus", "memory", "instanceType"):
        if overrides.get(key) is not None:
            merged[key] = overrides[key]
    return merged


def described(node_properties: Mapping[str, Any], node_overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``nodeProperties`` as DescribeJobs shows them for a job: ``numNodes`` and containers overridden."""
    overrides = {
        o["targetNodes"]: o.get("containerOverrides") or {}
        for o in (node_overrides or {}).get("nodePropertyOverrides") or []
    }
    ranges = []
    for entry in node_properties["nodeRangeProperties"]:
        shown = copy.deepcopy(dict(entry))
        shown["container"] = merge_container(entry["container"], overrides.get(entry["targetNodes"], {}))
        ranges.append(shown)
    return {
        "numNodes": effective_num_nodes(node_properties, node_overrides),
        "mainNode": node_properties["mainNode"],
        "nodeRangeProperties": ranges,
    }

"""The built-in scale cluster: a GPU fleet of thousands of virtual nodes, for load on one machine.

``airflow-gpu emulate kubernetes --scale 2000`` and the ``kubernetes_scale_emulator`` fixture serve
it. Its node groups are shaped like an EKS GPU fleet's: 8x H100 (``p5.48xlarge``) and 8x A100-80GB
(``p4de.24xlarge``) on spot and on demand, 4x L4 (``g6.24xlarge``) and CPU nodes (``m6i.8xlarge``).
Each GPU node has its accelerator's labels (GPU Feature Discovery, GKE, Karpenter), extended
resource and ``NoSchedule`` taint, from the catalog (``NodeSpec(accelerator=...)``), and every node
the kubelet's 110 pods. Combined with simulated containers (``simulated.local/...`` images: no
process per pod) one machine holds 10,000 pods on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_gpu.testing.kubernetes.cluster import MAX_GROUP_SIZE, ClusterSpec


@dataclass(frozen=True)
class NodeGroup:
    """One kind of node in the fleet and its share of the nodes, in percent."""

    name: str
    share: int
    accelerator: str | None
    capacity_type: str
    instance_type: str
    cpu: str
    memory: str


FLEET = (
    NodeGroup("h100-spot", 25, "H100-80GB-SXM:8", "spot", "p5.48xlarge", "192", "2048Gi"),
    NodeGroup("h100-on-demand", 10, "H100-80GB-SXM:8", "on-demand", "p5.48xlarge", "192", "2048Gi"),
    NodeGroup("a100-spot", 10, "A100-80GB:8", "spot", "p4de.24xlarge", "96", "1152Gi"),
    NodeGroup("a100-on-demand", 5, "A100-80GB:8", "on-demand", "p4de.24xlarge", "96", "1152Gi"),
    NodeGroup("l4", 20, "L4:4", "on-demand", "g6.24xlarge", "96", "384Gi"),
    NodeGroup("cpu", 30, None, "on-demand", "m6i.8xlarge", "32", "128Gi"),
)


def group_sizes(nodes: int) -> list[tuple[NodeGroup, int]]:
    """How many of ``nodes`` each group gets: its share, rounded so that they add up to ``nodes``
    (largest remainders first); groups with none are left out."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_GROUP_SIZE:
        raise ValueError(f"a scale cluster has from 1 to {MAX_GROUP_SIZE:,} nodes; got {nodes!r}")
    total = sum(group.share for group in FLEET)
    sizes = [nodes * group.share // total for group in FLEET]
    by_remainder = sorted(range(len(FLEET)), key=lambda i: -(nodes * FLEET[i].share % total))
    for i in by_remainder[: nodes - sum(sizes)]:
        sizes[i] += 1
    return [(group, size) for group, size in zip(FLEET, sizes, strict=True) if size]


def scale_cluster(nodes: int) -> ClusterSpec:
    """The fleet with ``nodes`` nodes, named ``<group>-1`` to ``<group>-N`` per group."""
    entries: list[dict[str, Any]] = [
        {
            "name": group.name,
            "count": size,
            "accelerator": group.accelerator,
            "capacity_type": group.capacity_type,
            "instance_type": group.instance_type,
            "capacity": {"cpu": group.cpu, "memory": group.memory},
        }
        for group, size in group_sizes(nodes)
    ]
    return ClusterSpec.from_dict({"name": f"scale-{nodes}", "nodes": entries})


def describe(nodes: int) -> str:
    """One line for the command to print: ``500 h100-spot (H100-80GB-SXM:8, spot), ...``."""
    return ", ".join(
        f"{size} {group.name} ({group.accelerator or 'CPU'}, {group.capacity_type})"
        for group, size in group_sizes(nodes)
    )

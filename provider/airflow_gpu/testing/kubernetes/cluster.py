"""A cluster described as data: nodes with labels, capacity and taints, from YAML or built in.

A node may name an ``accelerator`` (``H100-80GB-SXM:8``); its GPU Feature Discovery, Karpenter and
vendor labels, its extended resource and its ``NoSchedule`` taint then come from the accelerator
catalog, so the emulated nodes look like the ones the translations target.

.. code-block:: yaml

    nodes:
      - name: gpu-spot-1
        accelerator: H100-80GB-SXM:8
        capacity_type: spot            # spot | on-demand
        instance_type: p5.48xlarge
        capacity: {cpu: "192", memory: 2048Gi}
        labels: {team: research}
        taints: [{key: dedicated, value: ml, effect: NoSchedule}]
        arch: amd64                    # kubernetes.io/arch (amd64 unless given)
      - name: h100-spot                # a node group: h100-spot-1 ... h100-spot-500, alike
        count: 500
        accelerator: H100-80GB-SXM:8
        capacity_type: spot
    missing_images:                    # images that do not exist: ErrImagePull, ImagePullBackOff
      - registry.example.com/team/trainer:no-such-tag

Every node carries the labels every kubelet sets on its Node (``kubernetes.io/hostname`` = the
node name, ``kubernetes.io/os=linux``, ``kubernetes.io/arch`` and their ``beta.kubernetes.io/``
forms, still set by the 1.33 kubelet), so node selectors and affinities on them schedule.

A node entry with ``count: N`` is a node group: N nodes alike, named ``<name>-1`` to ``<name>-N``,
as a cloud's node group or Karpenter pool gives them. ``scale.py`` builds a fleet of such groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_gpu.accelerators.kubernetes import DEVICE_TAINT_KEYS
from airflow_gpu.accelerators.spec import Accelerator

CAPACITY_TYPE_LABELS = {"spot": ("spot", "SPOT"), "on-demand": ("on-demand", "ON_DEMAND")}
#: ``GOARCH`` values of the architectures Kubernetes releases node binaries for.
ARCHITECTURES = ("amd64", "arm64", "arm", "ppc64le", "s390x", "386")
#: The most nodes one group may have: more than the emulator holds (10,000s), fewer than a typo makes.
MAX_GROUP_SIZE = 100_000


def node_address(index: int) -> str:
    """The InternalIP of the cluster's ``index``-th node: 10.0.0.10 on, valid for any number of nodes."""
    number = index + 10
    return f"10.{(number >> 16) & 255}.{(number >> 8) & 255}.{number & 255}"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    accelerator: str | None = None
    capacity_type: str = "on-demand"
    instance_type: str | None = None
    capacity: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    arch: str = "amd64"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeSpec:
        """One node from its cluster-file entry; a ValueError names the field, the value and what
        is accepted."""
        if not isinstance(data, dict):
            raise ValueError(f"a node must be a mapping of {', '.join(cls.__dataclass_fields__)}; got {data!r}")
        known = list(cls.__dataclass_fields__)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"node {data.get('name', '?')!r}: unknown keys {unknown}; known: {', '.join(known)}")
        if not isinstance(data.get("name"), str) or not data["name"]:
            raise ValueError(f"a node needs a name (a non-empty string); got {data.get('name')!r}")
        if data.get("capacity_type", "on-demand") not in CAPACITY_TYPE_LABELS:
            raise ValueError(
                f"node {data['name']!r}: capacity_type must be spot or on-demand; got {data['capacity_type']!r}"
            )
        if data.get("arch", "amd64") not in ARCHITECTURES:
            raise ValueError(
                f"node {data['name']!r}: arch must be one of {', '.join(ARCHITECTURES)}; got {data['arch']!r}"
            )
        if data.get("accelerator") is not None:
            try:
                Accelerator.parse(str(data["accelerator"]))
            except ValueError as error:
                raise ValueError(f"node {data['name']!r}: accelerator {data['accelerator']!r}: {error}") from None
        return cls(
            name=str(data["name"]),
            accelerator=data.get("accelerator"),
            capacity_type=data.get("capacity_type", "on-demand"),
            instance_type=data.get("instance_type"),
            capacity={k: str(v) for k, v in (data.get("capacity") or {}).items()},
            labels={k: str(v) for k, v in (data.get("labels") or {}).items()},
            taints=tuple(data.get("taints") or ()),
            arch=str(data.get("arch", "amd64")),
        )

    def to_node(self, index: int) -> dict[str, Any]:
        """The Node object the API serves."""
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": self.arch,
            "beta.kubernetes.io/arch": self.arch,
            "karpenter.sh/capacity-type": CAPACITY_TYPE_LABELS[self.capacity_type][0],
            "eks.amazonaws.com/capacityType": CAPACITY_TYPE_LABELS[self.capacity_type][1],
        }
        if self.capacity_type == "spot":
            labels["cloud.google.com/gke-spot"] = "true"
        if self.instance_type:
            labels["node.kubernetes.io/instance-type"] = self.instance_type
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        taints: list[dict[str, str]] = []
        if self.accelerator:
            spec = Accelerator.parse(self.accelerator)
            labels.update(accelerator_labels(spec))
            capacity[spec.catalog_entry.resource_name] = str(spec.count)
            entry = spec.catalog_entry
            kind = f"gpu-{entry.vendor}" if entry.kind == "gpu" else entry.kind
            taints.append({"key": DEVICE_TAINT_KEYS[kind], "value": "present", "effect": "NoSchedule"})
        capacity.update(self.capacity)
        labels.update(self.labels)
        taints.extend(dict(t) for t in self.taints)
        return {
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": taints} if taints else {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": node_address(index)},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.33.0-airflow-gpu-emulator",
                    "kubeProxyVersion": "v1.33.0-airflow-gpu-emulator",
                    "containerRuntimeVersion": "local-process://1",
                    "operatingSystem": "linux",
                    "architecture": self.arch,
                    "osImage": "airflow-gpu emulator",
                    "kernelVersion": "6.1.0",
                    "bootID": f"boot-{self.name}",
                    "machineID": f"machine-{self.name}",
                    "systemUUID": f"uuid-{self.name}",
                },
            },
        }


def node_group(data: dict[str, Any]) -> tuple[NodeSpec, ...]:
    """A node entry of a cluster file: one node, or with ``count: N`` N nodes alike, named
    ``<name>-1`` to ``<name>-N``."""
    if isinstance(data, dict) and (unknown := sorted(set(data) - {"count", *NodeSpec.__dataclass_fields__})):
        known = ", ".join(["count", *NodeSpec.__dataclass_fields__])
        raise ValueError(f"node {data.get('name', '?')!r}: unknown keys {unknown}; known: {known}")
    if not isinstance(data, dict) or "count" not in data:
        return (NodeSpec.from_dict(data),)
    count = data["count"]
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GROUP_SIZE:
        raise ValueError(
            f"node {data.get('name', '?')!r}: count must be a whole number from 1 to {MAX_GROUP_SIZE:,}; got {count!r}"
        )
    template = NodeSpec.from_dict({key: value for key, value in data.items() if key != "count"})
    return tuple(replace(template, name=f"{template.name}-{i}") for i in range(1, count + 1))


def accelerator_labels(spec: Accelerator) -> dict[str, str]:
    """The labels device plugins, GPU Feature Discovery and Karpenter put on a node with ``spec``."""
    entry = spec.catalog_entry
    variant = spec.variants[0]
    labels: dict[str, str] = {}
    if entry.vendor == "nvidia":
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": variant.gfd_product or entry.name,
            "nvidia.com/gpu.count": str(spec.count),
            "nvidia.com/gpu.memory": str(variant.memory_gb * 1024),
            "nvidia.com/cuda.driver.major": "570",
        }
    if entry.amd_device_id:
        labels["amd.com/gpu.device-id"] = entry.amd_device_id
    if entry.karpenter_name and entry.kind == "gpu":
        labels |= {
            "karpenter.k8s.aws/instance-gpu-name": entry.karpenter_name,
            "karpenter.k8s.aws/instance-gpu-count": str(spec.count),
            "karpenter.k8s.aws/instance-gpu-memory": str(variant.memory_gb * 1024),
        }
    if entry.karpenter_name and entry.kind == "neuron":
        labels["karpenter.k8s.aws/instance-accelerator-name"] = entry.karpenter_name
    if variant.gke_accelerator:
        key = "cloud.google.com/gke-tpu-accelerator" if entry.kind == "tpu" else "cloud.google.com/gke-accelerator"
        labels[key] = variant.gke_accelerator
        topology = entry.tpu_topologies.get(spec.count)
        if topology:
            labels["cloud.google.com/gke-tpu-topology"] = topology
    return labels


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    nodes: tuple[NodeSpec, ...]
    #: Images no registry has: their containers fail to pull (``images.py``); all others "pull".
    missing_images: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "custom") -> ClusterSpec:
        nodes = data.get("nodes")
        if not isinstance(nodes, list) or not nodes:
            raise ValueError("a cluster needs a non-empty 'nodes' list")
        unknown = sorted(set(data) - {"name", "nodes", "missing_images"})
        if unknown:
            raise ValueError(f"unknown cluster keys {unknown}; known: name, nodes, missing_images")
        missing = data.get("missing_images") or []
        if not isinstance(missing, list) or not all(isinstance(image, str) and image for image in missing):
            raise ValueError("'missing_images' must be a list of image references")
        expanded = tuple(node for entry in nodes for node in node_group(entry))
        seen: set[str] = set()
        for node in expanded:
            if node.name in seen:
                raise ValueError(
                    f"node names must be unique; {node.name!r} comes twice (a group with count: N names its "
                    "nodes <name>-1 to <name>-N)"
                )
            seen.add(node.name)
        return cls(str(data.get("name", name)), expanded, tuple(missing))

    @classmethod
    def load(cls, source: str | Path) -> ClusterSpec:
        """``"demo"`` or the path of a YAML file."""
        if str(source) == "demo":
            return DEMO
        import yaml

        path = Path(source)
        return cls.from_dict(yaml.safe_load(path.read_text()), name=path.stem)


DEMO = ClusterSpec(
    "demo",
    (
        NodeSpec("gpu-spot-1", "H100-80GB-SXM:8", "spot", "p5.48xlarge", {"cpu": "192", "memory": "2048Gi"}),
        NodeSpec("gpu-spot-2", "H100-80GB-SXM:8", "spot", "p5.48xlarge", {"cpu": "192", "memory": "2048Gi"}),
        NodeSpec("gpu-on-demand-1", "L4:4", "on-demand", "g6.24xlarge", {"cpu": "96", "memory": "384Gi"}),
        NodeSpec("cpu-1", None, "on-demand", "m6i.4xlarge", {"cpu": "16", "memory": "64Gi"}),
    ),
)

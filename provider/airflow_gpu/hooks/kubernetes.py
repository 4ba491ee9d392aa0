"""``GPUKubernetesHook``: the cncf ``KubernetesHook`` plus what the cluster offers in GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

try:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "GPUKubernetesHook needs the cncf-kubernetes provider: pip install 'airflow-provider-gpu[kubernetes]'"
    ) from error

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.kubernetes import pod_requests

CAPACITY_LABELS: tuple[tuple[str, dict[str, str]], ...] = (
    ("karpenter.sh/capacity-type", {"spot": "spot", "on-demand": "on-demand"}),
    ("eks.amazonaws.com/capacityType", {"SPOT": "spot", "ON_DEMAND": "on-demand"}),
    ("cloud.google.com/gke-spot", {"true": "spot"}),
)


@dataclass(frozen=True)
class GPUCapacity:
    """GPUs of one type and capacity type across the cluster's nodes."""

    accelerator: str
    capacity_type: str
    resource: str
    nodes: int
    allocatable: int
    requested: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.requested, 0)

    def __str__(self) -> str:
        return (
            f"{self.accelerator} on {self.capacity_type}: {self.allocatable} on {self.nodes} node(s), {self.free} free"
        )


@cache
def _label_index() -> dict[tuple[str, str], str]:
    """(label key, value) -> catalog accelerator name, from every node-label value the catalog knows."""
    index: dict[tuple[str, str], str] = {}
    for entry in catalog.CATALOG:
        for variant in entry.variants:
            if variant.gfd_product:
                index[("nvidia.com/gpu.product", variant.gfd_product)] = f"{entry.name}-{variant.memory_gb}GB"
            if variant.gke_accelerator:
                index[("cloud.google.com/gke-accelerator", variant.gke_accelerator)] = (
                    f"{entry.name}-{variant.memory_gb}GB"
                )
        if entry.karpenter_name:
            index[("karpenter.k8s.aws/instance-gpu-name", entry.karpenter_name)] = entry.name
            index[("karpenter.k8s.aws/instance-accelerator-name", entry.karpenter_name)] = entry.name
        if entry.amd_device_id:
            index[("amd.com/gpu.device-id", entry.amd_device_id)] = entry.name
    return index


def node_accelerator(labels: Mapping[str, str]) -> str | None:
    for (key, value), name in _label_index().items():
        if labels.get(key) == value:
            return name
    return None


def node_capacity_type(labels: Mapping[str, str]) -> str:
    for key, values in CAPACITY_LABELS:
        if labels.get(key) in values:
            return values[labels[key]]
    return "on-demand"


def summarize(nodes: list[Mapping[str, Any]], pods: list[Mapping[str, Any]]) -> list[GPUCapacity]:
    """Group the device resources of ``nodes`` (API dicts) by accelerator and capacity type."""
    device_resources = {e.resource_name for e in catalog.CATALOG} | {"nvidia.com/gpu"}
    groups: dict[tuple[str, str, str], list[int]] = {}
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, amount in allocatable.items():
            if resource not in device_resources and not resource.startswith("nvidia.com/mig-"):
                continue
            if int(amount) <= 0:
                continue
            name = node_accelerator(labels) or resource
            if resource.startswith("nvidia.com/mig-"):
                name = f"{name} MIG {resource.removeprefix('nvidia.com/mig-')}"
            requested = sum(
                int(pod_requests(p).get(resource, 0))
                for p in pods
                if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            )
            totals = groups.setdefault((name, node_capacity_type(labels), resource), [0, 0, 0])
            totals[0] += 1
            totals[1] += int(amount)
            totals[2] += requested
    return [
        GPUCapacity(name, capacity, resource, *totals) for (name, capacity, resource), totals in sorted(groups.items())
    ]


def cluster_gpu_capacity(api: Any) -> list[GPUCapacity]:
    """``summarize`` over what a ``CoreV1Api`` client lists: every node and every pod."""
    serialize = api.api_client.sanitize_for_serialization
    nodes = [serialize(n) for n in api.list_node().items]
    pods = [serialize(p) for p in api.list_pod_for_all_namespaces().items]
    return summarize(nodes, pods)


class GPUKubernetesHook(KubernetesHook):
    """``KubernetesHook`` with the cluster's GPU capacity, for messages and for users' own tasks; its read of a
    pod by name is asked again through throttles and server errors."""

    def get_pod(self, name: str, namespace: str) -> Any:
        """The pod, asked again through 429, 5xx and dropped connections (``utils.api_retry``). KPO reads by name,
        once, the pod a resume is for and the pod the task state store names for a reattach: a 503 there failed
        the try (the twenty-fourth soak: a resume's first read, after its pod had succeeded)."""
        from airflow_gpu.utils.api_retry import call

        read = super().get_pod
        return call(lambda: read(name, namespace), f"reading pod {namespace}/{name}", log=self.log)

    def gpu_capacity(self) -> list[GPUCapacity]:
        """GPUs per accelerator type and capacity type: allocatable, requested by running pods, free."""
        return cluster_gpu_capacity(self.core_v1_client)

"""A local Kubernetes API with GPU nodes and spot faults (``KubernetesEmulator``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.cluster import ClusterSpec, NodeSpec
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

__all__ = ["ClusterSpec", "KubernetesEmulator", "NodeSpec"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesEmulator":
        from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

        return KubernetesEmulator
    if name in ("ClusterSpec", "NodeSpec"):
        from airflow_gpu.testing.kubernetes import cluster

        return getattr(cluster, name)
    raise AttributeError(name)

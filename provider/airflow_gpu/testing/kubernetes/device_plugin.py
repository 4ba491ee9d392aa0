"""The emulated nodes' NVIDIA device plugin: which of a node's GPUs each container of a pod gets.

As the real plugin does, a container that asks for ``nvidia.com/gpu: N`` is given N devices no
other running container holds, and its environment names them (``NVIDIA_VISIBLE_DEVICES``); a
MIG resource (``nvidia.com/mig-1g.10gb``) gives MIG devices. What the container then sees is
``airflow_gpu.testing.gpus``. A simulated container (``kubelet.simulation``) holds its devices all
the same, but nothing is written for it: it has no process to read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_gpu.accelerators.quantities import parse_quantity
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.testing import gpus
from airflow_gpu.testing.kubernetes.kubelet import simulation

MIG_PREFIX = "nvidia.com/mig-"


class DevicePlugin:
    """Device allocation on the nodes of one emulated cluster."""

    def __init__(self) -> None:
        self._accelerators: dict[str, Accelerator] = {}  # node -> what it carries
        self._in_use: dict[str, dict[int, tuple[str, str]]] = {}  # node -> device -> (namespace, pod)
        self._held: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (namespace, pod) -> (node, device)

    def add_node(self, name: str, accelerator: str | None) -> None:
        if accelerator:
            spec = Accelerator.parse(accelerator)
            if spec.catalog_entry.vendor == "nvidia":
                self._accelerators[name] = spec

    def allocate(self, pod: dict[str, Any], node: str, workdir: Callable[[], Path]) -> dict[str, dict[str, str]]:
        """Per container name, the environment its devices add (empty for a container without GPUs).

        ``workdir`` gives the pod's work directory, where a container's devices are written; it is
        asked for only when a container with a process has devices."""
        spec = self._accelerators.get(node)
        if spec is None:
            return {}
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        held = self._in_use.setdefault(node, {})
        allocated: dict[str, dict[str, str]] = {}
        for container in pod["spec"].get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            whole = _count(limits.get(spec.catalog_entry.resource_name))
            mig = next(((k[len(MIG_PREFIX) :], _count(v)) for k, v in limits.items() if k.startswith(MIG_PREFIX)), None)
            if whole:
                free = [i for i in range(spec.count) if i not in held][:whole]
                held.update(dict.fromkeys(free, key))
                self._held.setdefault(key, []).extend((node, index) for index in free)
                if simulation(container) is not None:
                    continue
                devices = gpus.devices(spec.type, free, node, memory_gb=spec.variants[0].memory_gb)
            elif mig and mig[1]:
                devices = gpus.devices(
                    spec.type, list(range(mig[1])), node, memory_gb=spec.variants[0].memory_gb, mig_profile=mig[0]
                )
            else:
                continue
            if simulation(container) is None:
                allocated[container["name"]] = gpus.install(devices, workdir() / "gpus" / container["name"])
        return allocated

    def release(self, namespace: str, name: str) -> None:
        for node, index in self._held.pop((namespace, name), ()):
            held = self._in_use.get(node, {})
            if held.get(index) == (namespace, name):
                del held[index]


def _count(quantity: Any) -> int:
    return math.floor(float(parse_quantity(quantity))) if quantity is not None else 0

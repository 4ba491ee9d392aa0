"""What an ``Accelerator`` becomes in an AWS Batch container job, as API dicts.

AWS Batch knows three resource types (``GPU``, ``VCPU``, ``MEMORY``). NVIDIA GPUs are a ``GPU``
requirement; Trainium and Inferentia are not resources at all but devices (``/dev/neuron0..N``)
passed through ``linuxParameters``; AMD GPUs, TPUs and MIG slices cannot run on Batch, which is an
error at parse time rather than a job stuck in RUNNABLE forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.catalog import InstanceType
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount, cpu_cores, memory_mib
from airflow_gpu.accelerators.shared_memory import SharedMemory, shared_memory_mib
from airflow_gpu.accelerators.spec import Accelerator

#: Share of an instance's memory that a default job asks for: the ECS agent and the OS keep the
#: rest, and a job asking for all of it never leaves RUNNABLE.
DEFAULT_MEMORY_SHARE = 0.9


def instance_types(accelerator: Accelerator | str) -> tuple[InstanceType, ...]:
    """AWS instance types that can host the spec, smallest first; empty if none can."""
    spec = Accelerator.parse(accelerator)
    memories = {v.memory_gb for v in spec.variants}
    hosts = [t for t in spec.catalog_entry.instance_types if t.accelerators >= spec.count and t.memory_gb in memories]
    return tuple(sorted(hosts, key=lambda t: (t.accelerators, t.vcpus, t.memory_gib)))


def _check_runs_on_batch(spec: Accelerator) -> tuple[InstanceType, ...]:
    if spec.mig is not None:
        raise AcceleratorSpecError(
            "mig", spec.mig, "AWS Batch hands out whole GPUs only; MIG slices need Kubernetes", ["None"]
        )
    entry = spec.catalog_entry
    if not entry.instance_types:
        on_aws = [e.name for e in catalog.CATALOG if e.instance_types]
        raise AcceleratorSpecError("type", spec.type, "no AWS instance type carries it", on_aws)
    hosts = instance_types(spec)
    if not hosts:
        largest = max(
            (t for t in entry.instance_types if t.memory_gb in {v.memory_gb for v in spec.variants}),
            key=lambda t: t.accelerators,
            default=None,
        )
        detail = f" (largest: {largest.name} with {largest.accelerators})" if largest else ""
        raise AcceleratorSpecError("count", spec.count, f"no AWS instance type carries {spec}{detail}")
    return hosts


def default_vcpus(spec: Accelerator, hosts: tuple[InstanceType, ...]) -> int:
    """The vCPUs that come with the spec's share of the smallest host."""
    host = hosts[0]
    return max(1, host.vcpus * spec.count // host.accelerators)


def default_memory_mib(spec: Accelerator, hosts: tuple[InstanceType, ...]) -> int:
    host = hosts[0]
    return int(host.memory_gib * 1024 * spec.count / host.accelerators * DEFAULT_MEMORY_SHARE)


def resource_requirements(
    accelerator: Accelerator | str, vcpus: CpuAmount | None = None, memory: MemoryAmount | None = None
) -> list[dict[str, str]]:
    """``resourceRequirements`` for the job; vCPUs and memory default to the GPU's share of a host."""
    spec = Accelerator.parse(accelerator)
    hosts = _check_runs_on_batch(spec)
    cores = default_vcpus(spec, hosts) if vcpus is None else cpu_cores(vcpus, "vcpus")
    mib = default_memory_mib(spec, hosts) if memory is None else memory_mib(memory)
    biggest_vcpus = max(t.vcpus for t in hosts)
    biggest_memory = max(t.memory_gib for t in hosts) * 1024
    if cores > biggest_vcpus:
        raise AcceleratorSpecError(
            "vcpus", vcpus, f"no instance type with {spec} has that many", [f"at most {biggest_vcpus}"]
        )
    if mib > biggest_memory:
        raise AcceleratorSpecError(
            "memory", memory, f"no instance type with {spec} has that much", [f"at most {biggest_memory} MiB"]
        )
    requirements = [{"type": "VCPU", "value": _number(cores)}, {"type": "MEMORY", "value": str(mib)}]
    if spec.catalog_entry.kind == "gpu":
        requirements.insert(0, {"type": "GPU", "value": str(spec.count)})
    return requirements


def _number(value: Any) -> str:
    text = str(value)
    return text[:-2] if text.endswith(".0") else text


def linux_parameters(
    accelerator: Accelerator | str, shared_memory: SharedMemory = "auto", memory: MemoryAmount | None = None
) -> dict[str, Any]:
    """``linuxParameters``: Neuron devices and ``sharedMemorySize`` (MiB)."""
    spec = Accelerator.parse(accelerator)
    hosts = _check_runs_on_batch(spec)
    parameters: dict[str, Any] = {}
    if spec.catalog_entry.kind == "neuron":
        parameters["devices"] = [
            {
                "hostPath": f"/dev/neuron{i}",
                "containerPath": f"/dev/neuron{i}",
                "permissions": ["READ", "WRITE"],
            }
            for i in range(spec.count)
        ]
    effective_memory = memory if memory is not None else default_memory_mib(spec, hosts)
    mib = shared_memory_mib(spec, shared_memory, effective_memory)
    if mib is not None:
        parameters["sharedMemorySize"] = mib
    return parameters


@dataclass(frozen=True)
class BatchPlacement:
    """Container properties for a job definition, and where the job can run."""

    resource_requirements: list[dict[str, str]]
    linux_parameters: dict[str, Any]
    instance_types: tuple[InstanceType, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "containerProperties": {
                "resourceRequirements": self.resource_requirements,
                "linuxParameters": self.linux_parameters,
            },
            "instanceTypes": [t.name for t in self.instance_types],
        }


def to_batch(
    accelerator: Accelerator | str,
    *,
    vcpus: CpuAmount | None = None,
    memory: MemoryAmount | None = None,
    shared_memory: SharedMemory = "auto",
) -> BatchPlacement:
    """The whole AWS Batch translation of a spec."""
    spec = Accelerator.parse(accelerator)
    return BatchPlacement(
        resource_requirements=resource_requirements(spec, vcpus, memory),
        linux_parameters=linux_parameters(spec, shared_memory, memory),
        instance_types=instance_types(spec),
    )


@dataclass(frozen=True)
class InstanceOffer:
    """An instance type a compute environment may launch, and the accelerator it carries."""

    accelerator: str  # catalog name, e.g. "A10G"
    instance_type: InstanceType


def instance_offers(instance_types: list[str] | tuple[str, ...]) -> tuple[InstanceOffer, ...]:
    """The accelerator instance types behind a compute environment's ``instanceTypes``.

    Batch takes families (``"p5"``) or exact types (``"g5.12xlarge"``); ``"optimal"`` and CPU
    families carry no accelerator and give nothing. Used for "queue gpu-spot offers g5 (A10G)
    only" errors and by the Batch emulator to decide where a GPU job can start.
    """
    wanted = {name.lower() for name in instance_types}
    return tuple(
        InstanceOffer(entry.name, host)
        for entry in catalog.CATALOG
        for host in entry.instance_types
        if host.name in wanted or host.name.split(".", 1)[0] in wanted
    )


def describe_offers(offers: tuple[InstanceOffer, ...]) -> str:
    """``"g5 (A10G), p5 (H100)"``: families and their accelerators, for messages."""
    families: dict[str, str] = {}
    for offer in offers:
        families.setdefault(offer.instance_type.name.split(".", 1)[0], offer.accelerator)
    return ", ".join(f"{family} ({accelerator})" for family, accelerator in families.items()) or "no accelerators"

"""What an ``Accelerator`` becomes in a Kubernetes pod, as plain Kubernetes-API dicts.

Pure functions of the spec: no ``kubernetes`` client import, so DAG parsing stays fast and the
output can be printed, diffed and tested as JSON. The dicts use the API's camelCase field names,
which is what ``KubernetesPodOperator`` accepts for ``affinity`` and ``tolerations`` and what
``kubernetes.client`` deserialises.

Which node carries which GPU is told by node labels, and clusters label nodes differently:
NVIDIA GPU Feature Discovery, GKE, Karpenter, or a scheme of the user's own. ``LabelScheme``
captures that choice once; the rest of the translation does not care.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_gpu.accelerators.catalog import AcceleratorType
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount, cpu_quantity, memory_quantity, parse_quantity
from airflow_gpu.accelerators.shared_memory import SharedMemory, shared_memory_mib
from airflow_gpu.accelerators.spec import Accelerator

Capacity = Literal["spot", "on-demand", "spot-if-available"]
CAPACITIES: tuple[str, ...] = ("spot", "on-demand", "spot-if-available")
MigStrategy = Literal["mixed", "single"]
MIG_STRATEGIES: tuple[str, ...] = ("mixed", "single")

#: Weight of the soft spot preference for ``capacity="spot-if-available"`` (1..100).
SPOT_PREFERENCE_WEIGHT = 100

#: Taints that clouds and common setups put on device nodes.
DEVICE_TAINT_KEYS: dict[str, str] = {
    "gpu-nvidia": "nvidia.com/gpu",
    "gpu-amd": "amd.com/gpu",
    "neuron": "aws.amazon.com/neuron",
    "tpu": "google.com/tpu",
}
#: Taints that mark spot nodes (GKE, AKS, and the Karpenter/EKS habit of tainting spot pools).
SPOT_TAINTS: tuple[dict[str, str], ...] = (
    {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {
        "key": "kubernetes.azure.com/scalesetpriority",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    },
    {"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    {"key": "eks.amazonaws.com/capacityType", "operator": "Equal", "value": "SPOT", "effect": "NoSchedule"},
)

GFD_PRODUCT = "nvidia.com/gpu.product"
AMD_DEVICE_ID = "amd.com/gpu.device-id"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
GKE_SPOT = "cloud.google.com/gke-spot"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
KARPENTER_ACCELERATOR_NAME = "karpenter.k8s.aws/instance-accelerator-name"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"


@dataclass(frozen=True)
class LabelScheme:
    """How a cluster's nodes say which accelerator and which capacity type they have.

    The built-in schemes are ``"nvidia-gfd"`` (the default; for other vendors it uses their own
    discovery labels), ``"gke"``, ``"karpenter"`` and ``"none"``. A cluster with labels of its own
    passes ``LabelScheme(name=..., gpu_label=..., gpu_values={...})`` or the same as a dict.

    ``gpu_values`` maps a spec (``"A100-80GB"``, or the type alone, ``"A100"``) to the label value;
    ``on_demand_value=None`` means on-demand nodes are the ones *without* the spot value.
    """

    name: str
    gpu_label: str | None = None
    gpu_values: Mapping[str, str] = field(default_factory=dict)
    capacity_label: str | None = None
    spot_value: str = "spot"
    on_demand_value: str | None = None

    @classmethod
    def coerce(cls, value: str | Mapping[str, Any] | LabelScheme) -> LabelScheme:
        if isinstance(value, LabelScheme):
            return value
        if isinstance(value, str):
            scheme = BUILTIN_SCHEMES.get(value.strip().lower())
            if scheme is None:
                raise AcceleratorSpecError(
                    "node_label_scheme", value, "unknown label scheme", [*BUILTIN_SCHEMES, "a mapping"]
                )
            return scheme
        if isinstance(value, Mapping):
            known = set(cls.__dataclass_fields__)
            unknown = sorted(set(value) - known)
            if unknown or "gpu_label" not in value:
                raise AcceleratorSpecError(
                    "node_label_scheme",
                    dict(value),
                    f"unknown keys {unknown}" if unknown else "a custom scheme needs 'gpu_label'",
                    sorted(known),
                )
            return cls(**{"name": "custom", **value})
        raise AcceleratorSpecError(
            "node_label_scheme", value, "expected a scheme name or a mapping", [*BUILTIN_SCHEMES]
        )


BUILTIN_SCHEMES: dict[str, LabelScheme] = {
    "nvidia-gfd": LabelScheme("nvidia-gfd", GFD_PRODUCT, capacity_label=KARPENTER_CAPACITY),
    "gke": LabelScheme("gke", GKE_ACCELERATOR, capacity_label=GKE_SPOT, spot_value="true"),
    "karpenter": LabelScheme("karpenter", KARPENTER_GPU_NAME, capacity_label=KARPENTER_CAPACITY),
    "none": LabelScheme("none"),
}


def _requirement(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        requirement["values"] = values
    return requirement


def _unique(values: list[str | None]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _no_label(accelerator: Accelerator, scheme: str, why: str) -> AcceleratorSpecError:
    return AcceleratorSpecError(
        "node_label_scheme",
        scheme,
        f"has no node label for {accelerator} ({why})",
        [*(name for name in BUILTIN_SCHEMES if name != scheme), "a custom mapping"],
    )


def _gfd_requirements(accelerator: Accelerator, mig_strategy: MigStrategy) -> list[dict[str, Any]]:
    """NVIDIA GPU Feature Discovery, or the matching discovery labels of other vendors."""
    entry = accelerator.catalog_entry
    if entry.vendor == "nvidia":
        products = _unique([v.gfd_product for v in accelerator.variants])
        if accelerator.mig is not None and mig_strategy == "single":
            # GFD's single strategy appends the profile to the product name.
            products = [f"{product}-MIG-{accelerator.mig}" for product in products]
        return [_requirement(GFD_PRODUCT, "In", products)]
    if entry.vendor == "amd" and entry.amd_device_id:
        return [_requirement(AMD_DEVICE_ID, "In", [entry.amd_device_id])]
    if entry.kind == "neuron":
        hosts = [t.name for t in entry.instance_types if t.accelerators >= accelerator.count]
        return [_requirement(INSTANCE_TYPE, "In", hosts)]
    if entry.kind == "tpu":
        return _tpu_requirements(accelerator, entry)
    raise _no_label(accelerator, "nvidia-gfd", "no discovery label is known for it")


def _tpu_requirements(accelerator: Accelerator, entry: AcceleratorType) -> list[dict[str, Any]]:
    requirements = [_requirement(GKE_TPU_ACCELERATOR, "In", _unique([v.gke_accelerator for v in accelerator.variants]))]
    topology = entry.tpu_topologies.get(accelerator.count)
    if topology is not None:
        requirements.append(_requirement(GKE_TPU_TOPOLOGY, "In", [topology]))
    return requirements


def _gke_requirements(accelerator: Accelerator) -> list[dict[str, Any]]:
    entry = accelerator.catalog_entry
    if entry.kind == "tpu":
        return _tpu_requirements(accelerator, entry)
    values = _unique([v.gke_accelerator for v in accelerator.variants])
    if entry.vendor != "nvidia" or not values:
        raise _no_label(accelerator, "gke", "GKE does not offer it")
    return [_requirement(GKE_ACCELERATOR, "In", values)]


def _karpenter_requirements(accelerator: Accelerator) -> list[dict[str, Any]]:
    entry = accelerator.catalog_entry
    if entry.karpenter_name is None:
        raise _no_label(accelerator, "karpenter", "no AWS instance type carries it")
    if entry.kind == "neuron":
        return [_requirement(KARPENTER_ACCELERATOR_NAME, "In", [entry.karpenter_name])]
    requirements = [_requirement(KARPENTER_GPU_NAME, "In", [entry.karpenter_name])]
    if accelerator.memory_gb is not None and len(entry.memory_variants) > 1:
        # Karpenter reports the GPU memory of the instance type in MiB (A100 40/80 GB share a name).
        requirements.append(_requirement(KARPENTER_GPU_MEMORY, "In", [str(accelerator.memory_gb * 1024)]))
    return requirements


def _custom_requirements(accelerator: Accelerator, scheme: LabelScheme) -> list[dict[str, Any]]:
    assert scheme.gpu_label is not None
    keys = [str(accelerator).split(":")[0], accelerator.type]
    if accelerator.memory_gb is not None:
        keys.insert(1, f"{accelerator.type}-{accelerator.memory_gb}GB")
    value = next((scheme.gpu_values[k] for k in keys if k in scheme.gpu_values), None)
    if value is None:
        raise AcceleratorSpecError(
            "node_label_scheme",
            scheme.name,
            f"gpu_values has no entry for {accelerator.type}",
            list(scheme.gpu_values) or ["a mapping like {'H100': 'h100'}"],
        )
    return [_requirement(scheme.gpu_label, "In", [value])]


def accelerator_requirements(
    accelerator: Accelerator,
    label_scheme: str | Mapping[str, Any] | LabelScheme = "nvidia-gfd",
    mig_strategy: MigStrategy = "mixed",
) -> list[dict[str, Any]]:
    """Node-selector requirements that pick nodes carrying this accelerator."""
    scheme = LabelScheme.coerce(label_scheme)
    if scheme is BUILTIN_SCHEMES["nvidia-gfd"]:
        return _gfd_requirements(accelerator, mig_strategy)
    if scheme is BUILTIN_SCHEMES["gke"]:
        return _gke_requirements(accelerator)
    if scheme is BUILTIN_SCHEMES["karpenter"]:
        return _karpenter_requirements(accelerator)
    if scheme.gpu_label is None:
        return []
    return _custom_requirements(accelerator, scheme)


def _check_capacity(capacity: str | None) -> None:
    if capacity is not None and capacity not in CAPACITIES:
        raise AcceleratorSpecError("capacity", capacity, "unknown capacity type", CAPACITIES)


def capacity_requirement(capacity: Capacity, scheme: LabelScheme) -> dict[str, Any] | None:
    """The requirement on the capacity-type label; on-demand is "not spot" so unlabelled nodes count."""
    if scheme.capacity_label is None:
        return None
    if capacity == "on-demand":
        if scheme.on_demand_value is not None:
            return _requirement(scheme.capacity_label, "In", [scheme.on_demand_value])
        return _requirement(scheme.capacity_label, "NotIn", [scheme.spot_value])
    return _requirement(scheme.capacity_label, "In", [scheme.spot_value])


def node_affinity(
    accelerator: Accelerator,
    label_scheme: str | Mapping[str, Any] | LabelScheme = "nvidia-gfd",
    capacity: Capacity | None = None,
    mig_strategy: MigStrategy = "mixed",
) -> dict[str, Any] | None:
    """A pod ``affinity`` (API dict) that places the pod on the right accelerator and capacity type.

    ``spot`` and ``on-demand`` are hard requirements; ``spot-if-available`` prefers spot nodes and
    accepts any. Returns None when the scheme constrains nothing.
    """
    _check_capacity(capacity)
    scheme = LabelScheme.coerce(label_scheme)
    required = accelerator_requirements(accelerator, scheme, mig_strategy)
    preferred: list[dict[str, Any]] = []
    if capacity is not None:
        requirement = capacity_requirement(capacity, scheme)
        if requirement is not None and capacity == "spot-if-available":
            preferred.append({"weight": SPOT_PREFERENCE_WEIGHT, "preference": {"matchExpressions": [requirement]}})
        elif requirement is not None:
            required.append(requirement)
    if not required and not preferred:
        return None
    node_affinity_: dict[str, Any] = {}
    if required:
        node_affinity_["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": required}]
        }
    if preferred:
        node_affinity_["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node_affinity_}


def resource_name(accelerator: Accelerator, mig_strategy: MigStrategy = "mixed") -> str:
    """The extended resource the device plugin advertises, e.g. ``nvidia.com/mig-3g.40gb``."""
    if mig_strategy not in MIG_STRATEGIES:
        raise AcceleratorSpecError("mig_strategy", mig_strategy, "unknown MIG strategy", MIG_STRATEGIES)
    if accelerator.mig is not None and mig_strategy == "mixed":
        return f"nvidia.com/mig-{accelerator.mig}"
    return accelerator.catalog_entry.resource_name


def container_resources(
    accelerator: Accelerator,
    cpu: CpuAmount | None = None,
    memory: MemoryAmount | None = None,
    mig_strategy: MigStrategy = "mixed",
) -> dict[str, dict[str, str]]:
    """Container ``resources``: the device as a limit (and the equal request Kubernetes expects).

    Extended resources cannot be overcommitted: Kubernetes requires a limit and, if a request is
    given, an equal one. CPU gets a request and no limit (a CPU limit throttles data loading);
    memory gets the same request and limit, so the pod is never OOM-killed for using what it asked.
    """
    device = {resource_name(accelerator, mig_strategy): str(accelerator.count)}
    limits, requests = dict(device), dict(device)
    if cpu is not None:
        requests["cpu"] = cpu_quantity(cpu)
    if memory is not None:
        requests["memory"] = limits["memory"] = memory_quantity(memory)
    return {"limits": limits, "requests": requests}


def tolerations(accelerator: Accelerator, capacity: Capacity | None = None) -> list[dict[str, str]]:
    """Tolerations for the device taint and, on spot capacity, the common spot taints."""
    _check_capacity(capacity)
    entry = accelerator.catalog_entry
    kind = f"gpu-{entry.vendor}" if entry.kind == "gpu" else entry.kind
    result = [{"key": DEVICE_TAINT_KEYS[kind], "operator": "Exists", "effect": "NoSchedule"}]
    if capacity in {"spot", "spot-if-available"}:
        result.extend(dict(taint) for taint in SPOT_TAINTS)
    return result


def shared_memory_volume(
    accelerator: Accelerator, size: SharedMemory = "auto", memory: MemoryAmount | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A memory-backed ``/dev/shm`` volume and its mount, or None for the runtime's 64 MiB."""
    mib = shared_memory_mib(accelerator, size, memory)
    if mib is None:
        return None
    volume = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{mib}Mi"}}
    return volume, {"name": "dshm", "mountPath": "/dev/shm"}


@dataclass(frozen=True)
class KubernetesPlacement:
    """Everything a pod needs to run a spec, as Kubernetes API dicts."""

    resources: dict[str, dict[str, str]]
    affinity: dict[str, Any] | None
    tolerations: list[dict[str, str]]
    volumes: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """The pod-spec fragment, keyed as in the API (``volumeMounts`` belongs to the container)."""
        return {
            "resources": self.resources,
            "affinity": self.affinity,
            "tolerations": self.tolerations,
            "volumes": self.volumes,
            "volumeMounts": self.volume_mounts,
        }


def to_kubernetes(
    accelerator: Accelerator | str,
    *,
    cpu: CpuAmount | None = None,
    memory: MemoryAmount | None = None,
    shared_memory: SharedMemory = "auto",
    capacity: Capacity | None = None,
    label_scheme: str | Mapping[str, Any] | LabelScheme = "nvidia-gfd",
    mig_strategy: MigStrategy = "mixed",
) -> KubernetesPlacement:
    """The whole Kubernetes translation of a spec."""
    spec = Accelerator.parse(accelerator)
    shm = shared_memory_volume(spec, shared_memory, memory)
    return KubernetesPlacement(
        resources=container_resources(spec, cpu, memory, mig_strategy),
        affinity=node_affinity(spec, label_scheme, capacity, mig_strategy),
        tolerations=tolerations(spec, capacity),
        volumes=[shm[0]] if shm else [],
        volume_mounts=[shm[1]] if shm else [],
    )


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Effective requests: the sum over containers (a limit stands in for a missing request), or the
    largest init container's if that is more."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        amounts = {k: float(parse_quantity(v)) for k, v in (resources.get("limits") or {}).items()}
        amounts.update({k: float(parse_quantity(v)) for k, v in (resources.get("requests") or {}).items()})
        return amounts

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for resource, amount in of(container).items():
            total[resource] = total.get(resource, 0.0) + amount
    for container in spec.get("initContainers") or []:
        for resource, amount in of(container).items():
            total[resource] = max(total.get(resource, 0.0), amount)
    total["pods"] = 1.0
    return total

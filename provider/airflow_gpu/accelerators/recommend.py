"""Which accelerators hold a model: the smallest count per catalog type, from a memory model.

The estimate is arithmetic a reader can check, not a lookup table:

* weights: parameters x bytes per parameter of the precision (fp32 4, bf16/fp16 2, fp8/int8 1,
  int4 0.5);
* gradients: trainable parameters x 2 bytes (4 in fp32);
* optimizer: trainable parameters x 12 bytes for Adam with mixed precision (two fp32 moments and
  an fp32 master copy), x 8 in pure fp32 (no master copy needed);
* activations, KV cache and workspace: a margin on top, per task;
* and each device keeps ``DEVICE_RESERVE`` of its memory for the CUDA context and fragmentation.

The memory is assumed spread evenly over the devices of one node (tensor parallelism for
inference, FSDP / ZeRO-3 for training), so ``n`` devices suffice when ``n`` x usable memory covers
the total. Multi-node runs are out of scope here: a type that needs more devices than one node has
is listed as not fitting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.spec import Accelerator

Task = Literal["inference", "lora", "finetune", "pretrain"]
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]

BYTES_PER_PARAMETER: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
#: Share of each device's memory that the workload cannot use (CUDA context, allocator slack).
DEVICE_RESERVE = 0.10
GB = 1e9


@dataclass(frozen=True)
class MemoryModel:
    """How one kind of task uses memory per parameter."""

    task: str
    trainable_fraction: float  # parameters that get gradients and optimizer state
    activation_margin: float  # activations / KV cache / workspace, as a share of the rest
    description: str


MEMORY_MODELS: dict[str, MemoryModel] = {
    "inference": MemoryModel("inference", 0.0, 0.20, "weights + 20% for KV cache and activations"),
    "lora": MemoryModel(
        "lora",
        0.01,
        0.30,
        "frozen weights, adapters of 1% of the parameters trained with Adam, +30% activations",
    ),
    "finetune": MemoryModel(
        "finetune", 1.0, 0.30, "all parameters trained with Adam (mixed precision), +30% activations"
    ),
    "pretrain": MemoryModel(
        "pretrain", 1.0, 0.50, "all parameters trained with Adam, +50% for large-batch activations"
    ),
}

# int4 only stores weights; the trainable adapters of QLoRA still train in bf16.
_TRAINING_PRECISIONS = {"fp32", "bf16", "fp16", "fp8"}
# A device "supports" a storage-only precision if it runs the compute precision behind it.
_COMPUTE_PRECISION = {"int4": "int8"}

_PARAMS = re.compile(r"^(?P<number>\d+(\.\d+)?)\s*(?P<unit>[kmbt]?)$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_parameter_count(value: str | int | float) -> int:
    """``"7B"`` -> 7e9; also ``"350M"``, ``"1.5b"``, ``"1.2T"`` or a plain number."""
    if isinstance(value, bool):
        raise AcceleratorSpecError("params", value, "not a parameter count", ["'7B'", "'350M'", "7000000000"])
    if isinstance(value, int | float):
        count = int(value)
    else:
        match = _PARAMS.match(value.strip())
        if match is None:
            raise AcceleratorSpecError("params", value, "not a parameter count", ["'7B'", "'350M'", "7000000000"])
        count = int(float(match["number"]) * _UNITS[match["unit"].lower()])
    if count <= 0:
        raise AcceleratorSpecError("params", value, "must be positive", ["'7B'", "'350M'"])
    return count


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a task needs, in GB (10^9), by component."""

    parameters: int
    task: str
    precision: str
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.gradients_gb + self.optimizer_gb + self.activations_gb


def estimate_memory(params: str | int | float, task: str = "inference", precision: str = "bf16") -> MemoryEstimate:
    """The memory a task needs, from ``MEMORY_MODELS`` and ``BYTES_PER_PARAMETER``."""
    count = parse_parameter_count(params)
    model = MEMORY_MODELS.get(task)
    if model is None:
        raise AcceleratorSpecError("task", task, "unknown task", MEMORY_MODELS)
    if precision not in BYTES_PER_PARAMETER:
        raise AcceleratorSpecError("precision", precision, "unknown precision", BYTES_PER_PARAMETER)
    if model.trainable_fraction >= 1.0 and precision not in _TRAINING_PRECISIONS:
        raise AcceleratorSpecError(
            "precision",
            precision,
            f"{task} trains every weight, which {precision} cannot store",
            sorted(_TRAINING_PRECISIONS),
        )
    trainable = count * model.trainable_fraction
    gradient_bytes = 4 if precision == "fp32" else 2
    optimizer_bytes = 8 if precision == "fp32" else 12
    weights = count * BYTES_PER_PARAMETER[precision] / GB
    gradients = trainable * gradient_bytes / GB
    optimizer = trainable * optimizer_bytes / GB
    activations = (weights + gradients + optimizer) * model.activation_margin
    return MemoryEstimate(count, task, precision, weights, gradients, optimizer, activations)


@dataclass(frozen=True)
class Recommendation:
    """One way to hold the workload: an accelerator spec and how much room it leaves."""

    accelerator: Accelerator
    required_gb: float
    usable_gb: float

    @property
    def headroom_gb(self) -> float:
        return self.usable_gb - self.required_gb


def _usable(memory_gb: float) -> float:
    return memory_gb * (1 - DEVICE_RESERVE)


def recommend(
    params: str | int | float,
    task: str = "inference",
    precision: str = "bf16",
    vendors: tuple[str, ...] | None = None,
    include_mig: bool = True,
) -> list[Recommendation]:
    """For each catalog type and memory size, the fewest devices (or smallest MIG slice) that hold
    the workload on one node, cheapest in provisioned memory first.

    Types that cannot compute in ``precision`` (bf16 before Ampere, fp8 before Ada/Hopper) are left
    out, as are types that need more devices than one node has.
    """
    estimate = estimate_memory(params, task, precision)
    if vendors is not None:
        unknown = sorted(set(vendors) - {e.vendor for e in catalog.CATALOG})
        if unknown:
            raise AcceleratorSpecError(
                "vendor", unknown[0], "unknown vendor", sorted({e.vendor for e in catalog.CATALOG})
            )
    compute = _COMPUTE_PRECISION.get(precision, precision)
    results: list[Recommendation] = []
    for entry in catalog.CATALOG:
        if (vendors is not None and entry.vendor not in vendors) or compute not in entry.precisions:
            continue
        for memory_gb in entry.memory_variants:
            variant_spec = {"type": entry.name, "memory_gb": memory_gb}
            if include_mig:
                profiles = {p.name: p for v in entry.variants if v.memory_gb == memory_gb for p in v.mig_profiles}
                for profile in sorted(profiles.values(), key=lambda p: (p.memory_gb, p.compute_slices)):
                    if profile.compute_slices < 7 and _usable(profile.memory_gb) >= estimate.total_gb:
                        spec = Accelerator(**variant_spec, mig=profile.name)
                        results.append(Recommendation(spec, estimate.total_gb, _usable(profile.memory_gb)))
                        break
            for count in entry.counts:
                if count * _usable(memory_gb) >= estimate.total_gb:
                    spec = Accelerator(**variant_spec, count=count)
                    results.append(Recommendation(spec, estimate.total_gb, count * _usable(memory_gb)))
                    break
    return sorted(results, key=lambda r: (r.usable_gb, r.accelerator.type))


def not_fitting(
    params: str | int | float,
    task: str = "inference",
    precision: str = "bf16",
    vendors: tuple[str, ...] | None = None,
) -> list[str]:
    """Catalog types that support the precision but whose largest node cannot hold the workload."""
    estimate = estimate_memory(params, task, precision)
    compute = _COMPUTE_PRECISION.get(precision, precision)
    return [
        entry.name
        for entry in catalog.CATALOG
        if (vendors is None or entry.vendor in vendors)
        and compute in entry.precisions
        and max(entry.counts) * _usable(max(entry.memory_variants)) < estimate.total_gb
    ]


def unsupported(precision: str, vendors: tuple[str, ...] | None = None) -> list[str]:
    """Catalog types that cannot compute in ``precision``."""
    compute = _COMPUTE_PRECISION.get(precision, precision)
    return [e.name for e in catalog.CATALOG if (vendors is None or e.vendor in vendors) and compute not in e.precisions]

"""Every accelerator fact the provider relies on, as data.

One place to read and to extend: add an entry to ``CATALOG`` and the parser, the validation,
the Kubernetes and AWS Batch translations, ``recommend`` and ``airflow-gpu catalog`` all know it.
Nothing here imports Airflow, pydantic or a cloud SDK.

Sources: NVIDIA's CUDA GPU compute-capability list and CUDA release notes (minimum CUDA per
architecture), the NVIDIA MIG user guide "Supported MIG profiles" (profiles and instance counts),
NVIDIA GPU Feature Discovery (``nvidia.com/gpu.product`` values are the NVML product name with
spaces replaced by dashes), GKE's ``cloud.google.com/gke-accelerator`` and
``cloud.google.com/gke-tpu-accelerator`` values, Karpenter's ``karpenter.k8s.aws/instance-gpu-name``
and ``instance-accelerator-name`` values, the AMD GPU node labeller's ``amd.com/gpu.device-id``,
and the EC2 accelerated-computing instance type pages (vCPUs, memory, accelerators).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

Vendor = Literal["nvidia", "amd", "aws", "google"]
DeviceKind = Literal["gpu", "neuron", "tpu"]

_MIG_NAME = re.compile(r"^(?P<slices>[1-7])g\.(?P<memory>\d+)gb$")


@dataclass(frozen=True)
class MigProfile:
    """A MIG GPU-instance profile, e.g. ``3g.40gb``, and how many fit on one GPU."""

    name: str
    max_instances: int

    @property
    def compute_slices(self) -> int:
        """Sevenths of the GPU's SMs: 7 means the profile takes the whole GPU."""
        match = _MIG_NAME.match(self.name)
        if match is None:  # guarded by a catalog test
            raise ValueError(f"malformed MIG profile name {self.name!r}")
        return int(match["slices"])

    @property
    def memory_gb(self) -> int:
        match = _MIG_NAME.match(self.name)
        if match is None:
            raise ValueError(f"malformed MIG profile name {self.name!r}")
        return int(match["memory"])


def _mig(*profiles: tuple[str, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, count) for name, count in profiles)


@dataclass(frozen=True)
class Variant:
    """One memory size and form factor of an accelerator, as a node reports it."""

    memory_gb: int
    form_factor: str
    gfd_product: str | None = None  # nvidia.com/gpu.product
    gke_accelerator: str | None = None  # cloud.google.com/gke-accelerator / gke-tpu-accelerator
    mig_profiles: tuple[MigProfile, ...] = ()

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def label(self) -> str:
        return f"{self.memory_gb} GB {self.form_factor}"


@dataclass(frozen=True)
class InstanceType:
    """An AWS instance type and the accelerators it carries."""

    name: str
    accelerators: int
    memory_gb: int  # memory of each accelerator, to tell variants apart
    vcpus: int
    memory_gib: int


@dataclass(frozen=True)
class AcceleratorType:
    """A catalog entry: one accelerator model with all its variants."""

    name: str
    vendor: Vendor
    kind: DeviceKind
    architecture: str
    variants: tuple[Variant, ...]
    resource_name: str  # Kubernetes extended resource
    max_per_node: int
    aliases: tuple[str, ...] = ()
    compute_capability: str | None = None  # NVIDIA only
    min_cuda: str | None = None  # NVIDIA only
    max_cuda_major: int | None = None  # last CUDA major that still supports it
    precisions: frozenset[str] = frozenset({"fp32", "fp16", "int8"})
    karpenter_name: str | None = None  # instance-gpu-name / instance-accelerator-name
    amd_device_id: str | None = None  # amd.com/gpu.device-id
    instance_types: tuple[InstanceType, ...] = ()
    # Counts that a node can be asked for when not every count up to max_per_node is possible
    # (a GKE TPU node is requested whole); empty means 1..max_per_node.
    allowed_counts: tuple[int, ...] = ()
    tpu_topologies: dict[int, str] = field(default_factory=dict)  # chips -> gke-tpu-topology

    @property
    def memory_variants(self) -> tuple[int, ...]:
        return tuple(sorted({v.memory_gb for v in self.variants}))

    @property
    def form_factors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.form_factor for v in self.variants))

    @property
    def supports_mig(self) -> bool:
        return any(v.mig_profiles for v in self.variants)

    @property
    def counts(self) -> tuple[int, ...]:
        return self.allowed_counts or tuple(range(1, self.max_per_node + 1))


_AMPERE_PRECISIONS = frozenset({"fp32", "bf16", "fp16", "int8"})
_FP8_PRECISIONS = frozenset({"fp32", "bf16", "fp16", "fp8", "int8"})

_A100_40_MIG = _mig(("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1))
_80GB_MIG = _mig(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1))
_H100_NVL_MIG = _mig(("1g.12gb", 7), ("1g.24gb", 4), ("2g.24gb", 3), ("3g.47gb", 2), ("4g.47gb", 1), ("7g.94gb", 1))
_H200_MIG = _mig(("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2), ("4g.71gb", 1), ("7g.141gb", 1))
# B200 (180 GB usable): profile names as the NVIDIA GPU Operator's default mig-parted config lists
# them; instance counts follow the 7-slice geometry that every Hopper/Blackwell MIG GPU shares.
_B200_MIG = _mig(("1g.23gb", 7), ("1g.45gb", 4), ("2g.45gb", 3), ("3g.90gb", 2), ("4g.90gb", 1), ("7g.180gb", 1))


def _ec2(name: str, accelerators: int, memory_gb: int, vcpus: int, memory_gib: int) -> InstanceType:
    return InstanceType(name, accelerators, memory_gb, vcpus, memory_gib)


# The g5, g6 and g6e families share one ladder of sizes: (suffix, GPUs, vCPUs, GiB of memory).
_G_FAMILY_SIZES = (
    ("xlarge", 1, 4, 16),
    ("2xlarge", 1, 8, 32),
    ("4xlarge", 1, 16, 64),
    ("8xlarge", 1, 32, 128),
    ("16xlarge", 1, 64, 256),
    ("12xlarge", 4, 48, 192),
    ("24xlarge", 4, 96, 384),
    ("48xlarge", 8, 192, 768),
)


def _g_family(prefix: str, gpu_memory_gb: int, memory_scale: int = 1) -> tuple[InstanceType, ...]:
    """A g-family ladder; g6e has twice the host memory of g5/g6 at every size."""
    return tuple(
        _ec2(f"{prefix}.{suffix}", gpus, gpu_memory_gb, vcpus, memory * memory_scale)
        for suffix, gpus, vcpus, memory in _G_FAMILY_SIZES
    )


CATALOG: tuple[AcceleratorType, ...] = (
    AcceleratorType(
        name="V100",
        vendor="nvidia",
        kind="gpu",
        architecture="Volta",
        compute_capability="7.0",
        min_cuda="9.0",
        max_cuda_major=12,  # CUDA 13 dropped Volta
        aliases=("tesla-v100",),
        variants=(
            Variant(16, "SXM", "Tesla-V100-SXM2-16GB", "nvidia-tesla-v100"),
            Variant(32, "SXM", "Tesla-V100-SXM2-32GB"),
            Variant(16, "PCIe", "Tesla-V100-PCIE-16GB"),
            Variant(32, "PCIe", "Tesla-V100-PCIE-32GB"),
        ),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="v100",
        instance_types=(
            _ec2("p3.2xlarge", 1, 16, 8, 61),
            _ec2("p3.8xlarge", 4, 16, 32, 244),
            _ec2("p3.16xlarge", 8, 16, 64, 488),
            _ec2("p3dn.24xlarge", 8, 32, 96, 768),
        ),
    ),
    AcceleratorType(
        name="T4",
        vendor="nvidia",
        kind="gpu",
        architecture="Turing",
        compute_capability="7.5",
        min_cuda="10.0",
        aliases=("tesla-t4",),
        variants=(Variant(16, "PCIe", "Tesla-T4", "nvidia-tesla-t4"),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="t4",
        instance_types=(
            _ec2("g4dn.xlarge", 1, 16, 4, 16),
            _ec2("g4dn.2xlarge", 1, 16, 8, 32),
            _ec2("g4dn.4xlarge", 1, 16, 16, 64),
            _ec2("g4dn.8xlarge", 1, 16, 32, 128),
            _ec2("g4dn.16xlarge", 1, 16, 64, 256),
            _ec2("g4dn.12xlarge", 4, 16, 48, 192),
            _ec2("g4dn.metal", 8, 16, 96, 384),
        ),
    ),
    AcceleratorType(
        name="A10G",
        vendor="nvidia",
        kind="gpu",
        architecture="Ampere",
        compute_capability="8.6",
        min_cuda="11.1",
        precisions=_AMPERE_PRECISIONS,
        variants=(Variant(24, "PCIe", "NVIDIA-A10G"),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="a10g",
        instance_types=_g_family("g5", 24),
    ),
    AcceleratorType(
        name="L4",
        vendor="nvidia",
        kind="gpu",
        architecture="Ada Lovelace",
        compute_capability="8.9",
        min_cuda="11.8",
        precisions=_FP8_PRECISIONS,
        variants=(Variant(24, "PCIe", "NVIDIA-L4", "nvidia-l4"),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="l4",
        instance_types=_g_family("g6", 24),
    ),
    AcceleratorType(
        name="L40S",
        vendor="nvidia",
        kind="gpu",
        architecture="Ada Lovelace",
        compute_capability="8.9",
        min_cuda="11.8",
        precisions=_FP8_PRECISIONS,
        variants=(Variant(48, "PCIe", "NVIDIA-L40S"),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="l40s",
        instance_types=_g_family("g6e", 48, memory_scale=2),
    ),
    AcceleratorType(
        name="A100",
        vendor="nvidia",
        kind="gpu",
        architecture="Ampere",
        compute_capability="8.0",
        min_cuda="11.0",
        precisions=_AMPERE_PRECISIONS,
        variants=(
            Variant(40, "SXM", "NVIDIA-A100-SXM4-40GB", "nvidia-tesla-a100", _A100_40_MIG),
            Variant(80, "SXM", "NVIDIA-A100-SXM4-80GB", "nvidia-a100-80gb", _80GB_MIG),
            Variant(40, "PCIe", "NVIDIA-A100-PCIE-40GB", None, _A100_40_MIG),
            Variant(80, "PCIe", "NVIDIA-A100-80GB-PCIe", None, _80GB_MIG),
        ),
        resource_name="nvidia.com/gpu",
        max_per_node=16,  # GCP a2-megagpu-16g
        karpenter_name="a100",
        instance_types=(
            _ec2("p4d.24xlarge", 8, 40, 96, 1152),
            _ec2("p4de.24xlarge", 8, 80, 96, 1152),
        ),
    ),
    AcceleratorType(
        name="H100",
        vendor="nvidia",
        kind="gpu",
        architecture="Hopper",
        compute_capability="9.0",
        min_cuda="11.8",
        precisions=_FP8_PRECISIONS,
        variants=(
            Variant(80, "SXM", "NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb", _80GB_MIG),
            Variant(80, "PCIe", "NVIDIA-H100-PCIe", None, _80GB_MIG),
            Variant(94, "NVL", "NVIDIA-H100-NVL", None, _H100_NVL_MIG),
        ),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="h100",
        instance_types=(
            _ec2("p5.4xlarge", 1, 80, 16, 256),
            _ec2("p5.48xlarge", 8, 80, 192, 2048),
        ),
    ),
    AcceleratorType(
        name="H200",
        vendor="nvidia",
        kind="gpu",
        architecture="Hopper",
        compute_capability="9.0",
        min_cuda="11.8",
        precisions=_FP8_PRECISIONS,
        variants=(Variant(141, "SXM", "NVIDIA-H200", "nvidia-h200-141gb", _H200_MIG),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="h200",
        instance_types=(
            _ec2("p5e.48xlarge", 8, 141, 192, 2048),
            _ec2("p5en.48xlarge", 8, 141, 192, 2048),
        ),
    ),
    AcceleratorType(
        name="B200",
        vendor="nvidia",
        kind="gpu",
        architecture="Blackwell",
        compute_capability="10.0",
        min_cuda="12.8",
        precisions=_FP8_PRECISIONS | {"fp4"},
        variants=(Variant(180, "SXM", "NVIDIA-B200", "nvidia-b200", _B200_MIG),),
        resource_name="nvidia.com/gpu",
        max_per_node=8,
        karpenter_name="b200",
        instance_types=(_ec2("p6-b200.48xlarge", 8, 180, 192, 2048),),
    ),
    AcceleratorType(
        name="MI250X",
        vendor="amd",
        kind="gpu",
        architecture="CDNA2",
        precisions=_AMPERE_PRECISIONS,
        aliases=("instinct-mi250x",),
        # Each MI250X module shows the host two GPU dies of 64 GB; Kubernetes counts dies.
        variants=(Variant(64, "OAM"),),
        resource_name="amd.com/gpu",
        max_per_node=8,
        amd_device_id="740c",
    ),
    AcceleratorType(
        name="MI300X",
        vendor="amd",
        kind="gpu",
        architecture="CDNA3",
        precisions=_FP8_PRECISIONS,
        aliases=("instinct-mi300x",),
        variants=(Variant(192, "OAM"),),
        resource_name="amd.com/gpu",
        max_per_node=8,
        amd_device_id="74a1",
    ),
    AcceleratorType(
        name="Trainium",
        vendor="aws",
        kind="neuron",
        architecture="NeuronCore-v2",
        precisions=_FP8_PRECISIONS,
        aliases=("trn1", "trainium1", "trn"),
        variants=(Variant(32, "chip"),),
        resource_name="aws.amazon.com/neuron",
        max_per_node=16,
        karpenter_name="trainium",
        instance_types=(
            _ec2("trn1.2xlarge", 1, 32, 8, 32),
            _ec2("trn1.32xlarge", 16, 32, 128, 512),
            _ec2("trn1n.32xlarge", 16, 32, 128, 512),
        ),
    ),
    AcceleratorType(
        name="Trainium2",
        vendor="aws",
        kind="neuron",
        architecture="NeuronCore-v3",
        precisions=_FP8_PRECISIONS,
        aliases=("trn2",),
        variants=(Variant(96, "chip"),),
        resource_name="aws.amazon.com/neuron",
        max_per_node=16,
        karpenter_name="trainium2",
        instance_types=(_ec2("trn2.48xlarge", 16, 96, 192, 2048),),
    ),
    AcceleratorType(
        name="Inferentia2",
        vendor="aws",
        kind="neuron",
        architecture="NeuronCore-v2",
        precisions=_FP8_PRECISIONS,
        aliases=("inf2",),
        variants=(Variant(32, "chip"),),
        resource_name="aws.amazon.com/neuron",
        max_per_node=12,
        karpenter_name="inferentia2",
        instance_types=(
            _ec2("inf2.xlarge", 1, 32, 4, 16),
            _ec2("inf2.8xlarge", 1, 32, 32, 128),
            _ec2("inf2.24xlarge", 6, 32, 96, 384),
            _ec2("inf2.48xlarge", 12, 32, 192, 768),
        ),
    ),
    AcceleratorType(
        name="TPU-v5e",
        vendor="google",
        kind="tpu",
        architecture="TPU v5e",
        precisions=frozenset({"fp32", "bf16", "int8"}),
        aliases=("tpu-v5-lite", "tpuv5e", "v5e", "tpu-v5-lite-podslice", "v5litepod"),
        variants=(Variant(16, "chip", gke_accelerator="tpu-v5-lite-podslice"),),
        resource_name="google.com/tpu",
        max_per_node=8,
        allowed_counts=(1, 4, 8),
        tpu_topologies={1: "1x1", 4: "2x2", 8: "2x4"},
    ),
    AcceleratorType(
        name="TPU-v5p",
        vendor="google",
        kind="tpu",
        architecture="TPU v5p",
        precisions=frozenset({"fp32", "bf16", "int8"}),
        aliases=("tpuv5p", "v5p", "tpu-v5p-slice"),
        variants=(Variant(95, "chip", gke_accelerator="tpu-v5p-slice"),),
        resource_name="google.com/tpu",
        max_per_node=4,
        allowed_counts=(4,),
        tpu_topologies={4: "2x2x1"},
    ),
)

# Spellings of form factors people type, mapped to the catalog's.
FORM_FACTOR_ALIASES: dict[str, str] = {
    "sxm": "SXM",
    "sxm2": "SXM",
    "sxm4": "SXM",
    "sxm5": "SXM",
    "hbm3": "SXM",
    "pcie": "PCIe",
    "pci": "PCIe",
    "nvl": "NVL",
    "oam": "OAM",
    "chip": "chip",
}


def _alias_key(text: str) -> str:
    """Case, spaces, underscores and a vendor prefix never matter in a name."""
    key = re.sub(r"[\s_]+", "-", text.strip().lower())
    return re.sub(r"^(nvidia|amd|aws|google)-", "", key)


@cache
def _by_alias() -> dict[str, AcceleratorType]:
    table: dict[str, AcceleratorType] = {}
    for entry in CATALOG:
        for alias in (entry.name, *entry.aliases):
            key = _alias_key(alias)
            if key in table:  # guarded by a catalog test
                raise ValueError(f"alias {alias!r} is used by {table[key].name} and {entry.name}")
            table[key] = entry
    return table


def aliases() -> tuple[str, ...]:
    """Every name the parser accepts for a type, lowercase."""
    return tuple(_by_alias())


def lookup(name: str) -> AcceleratorType | None:
    """The catalog entry for a name or alias, whatever its case, or None."""
    return _by_alias().get(_alias_key(name))


def get(name: str) -> AcceleratorType:
    """The catalog entry for a canonical name or alias; KeyError if there is none."""
    entry = lookup(name)
    if entry is None:
        raise KeyError(name)
    return entry


def names() -> tuple[str, ...]:
    return tuple(entry.name for entry in CATALOG)

"""Whether an image runs on an accelerator: the rules, with reasons a person can read.

NVIDIA: the image's CUDA must be at least what the GPU architecture needs (B200 needs 12.8, H100
11.8), no newer than the GPU's last supported major (CUDA 13 dropped Volta), and, when the node's
driver is known, no newer than that driver runs. AMD needs a ROCm image of a version that knows
the GPU; Trainium and Inferentia need a Neuron image of an SDK that knows the chip. A CUDA image on
anything but an NVIDIA GPU never works.
"""

from __future__ import annotations

from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.images.cuda import (
    Compatibility,
    Version,
    driver_limit_text,
    driver_runs,
    parse_version,
    show,
)
from airflow_gpu.images.tags import ImageInfo

#: First ROCm release that supports each AMD GPU (ROCm compatibility matrix).
MIN_ROCM: dict[str, Version] = {"MI250X": (5, 0), "MI300X": (6, 0)}
#: First Neuron SDK release that supports each chip (Neuron release notes: Trn2 arrived in 2.21).
MIN_NEURON_SDK: dict[str, Version] = {"Trainium": (2, 5), "Inferentia2": (2, 5), "Trainium2": (2, 21)}

PLATFORM_OF_KIND = {"gpu-nvidia": "cuda", "gpu-amd": "rocm", "neuron": "neuron", "tpu": "tpu"}
_STACK_NAME = {"cuda": "a CUDA", "rocm": "a ROCm", "neuron": "an AWS Neuron", "tpu": "a JAX or PyTorch/XLA"}


def required_platform(accelerator: Accelerator) -> str:
    entry = accelerator.catalog_entry
    return PLATFORM_OF_KIND[f"gpu-{entry.vendor}" if entry.kind == "gpu" else entry.kind]


def gpu_requirement(accelerator: Accelerator) -> str:
    """What the accelerator needs from an image, in one phrase."""
    entry = accelerator.catalog_entry
    platform = required_platform(accelerator)
    if platform == "cuda":
        gpu = f"{entry.name} ({entry.architecture}, compute capability {entry.compute_capability})"
        text = f"{gpu} needs CUDA >= {entry.min_cuda}"
        if entry.max_cuda_major is not None:
            text += f" and <= {entry.max_cuda_major}.x"
        return text
    if platform == "rocm":
        return f"{entry.name} ({entry.architecture}) needs ROCm >= {show(MIN_ROCM[entry.name])}"
    if platform == "neuron":
        return (
            f"{entry.name} ({entry.architecture}) needs an AWS Neuron image, SDK >= {show(MIN_NEURON_SDK[entry.name])}"
        )
    return f"{entry.name} needs a JAX or PyTorch/XLA image for TPUs"


def problems(
    image: ImageInfo,
    accelerator: Accelerator,
    driver: Version | None = None,
    compatibility: Compatibility = "strict",
    driver_label: str | None = None,
) -> list[str]:
    """Why ``image`` cannot run on ``accelerator``; empty if it can or if the image says too little."""
    platform = required_platform(accelerator)
    entry = accelerator.catalog_entry
    if image.platform == "unknown":
        return []
    if image.platform != platform:
        has, needs = _STACK_NAME[image.platform], _STACK_NAME[platform]
        return [f"{image.reference} is {has} image; {entry.name} needs {needs} image"]
    found: list[str] = []
    if platform == "cuda" and image.cuda is not None:
        assert entry.min_cuda is not None
        if image.cuda[:2] < parse_version(entry.min_cuda):
            found.append(f"{gpu_requirement(accelerator)}; the image has CUDA {show(image.cuda)}")
        if entry.max_cuda_major is not None and image.cuda[0] > entry.max_cuda_major:
            dropped = f"CUDA {image.cuda[0]} dropped {entry.architecture} ({entry.name})"
            found.append(f"{dropped}; the image has CUDA {show(image.cuda)}")
        if driver is not None and not driver_runs(image.cuda, driver, compatibility):
            found.append(
                f"{driver_limit_text(driver, compatibility, driver_label)}; the image has CUDA {show(image.cuda)}"
            )
    if platform == "rocm" and image.rocm is not None and image.rocm[:2] < MIN_ROCM[entry.name]:
        found.append(f"{gpu_requirement(accelerator)}; the image has ROCm {show(image.rocm)}")
    if platform == "neuron" and image.neuron_sdk is not None and image.neuron_sdk[:2] < MIN_NEURON_SDK[entry.name]:
        found.append(f"{gpu_requirement(accelerator)}; the image has SDK {show(image.neuron_sdk)}")
    return found

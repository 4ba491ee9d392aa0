"""Read what an image reference says about itself: framework, CUDA, ROCm or Neuron SDK, flavor.

Every format in the catalog has a parser here, and the catalog's metadata is produced by these
parsers, so a tag and its metadata cannot disagree. References of other shapes still give up a
CUDA version when their tag carries one (``...cuda12.4...``, ``...-cu128-...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from airflow_gpu.images.cuda import Version, parse_version

Platform = Literal["cuda", "rocm", "neuron", "unknown"]

#: NGC PyTorch monthly releases: CUDA (DESIGN.md facts) and the PyTorch base version of each
#: (from the NGC release notes as remembered; not re-checked here, see the closing note).
NGC_PYTORCH_RELEASES: dict[str, tuple[str, str]] = {
    "24.12": ("12.6.3", "2.6.0"),
    "25.01": ("12.8.0", "2.6.0"),
    "25.08": ("13.0.0", "2.8.0"),
}


@dataclass(frozen=True)
class ImageInfo:
    """What a reference tells about an image; None where it tells nothing."""

    reference: str
    family: str  # pytorch, ngc, nvidia-cuda, aws-dlc, neuron, rocm, or other
    platform: Platform
    framework: str | None = None
    framework_version: Version | None = None
    cuda: Version | None = None
    cudnn: int | None = None
    rocm: Version | None = None
    neuron_sdk: Version | None = None
    flavor: str | None = None
    python: str | None = None
    os: str | None = None

    @property
    def accelerator_stack(self) -> str:
        """``CUDA 12.8``, ``ROCm 6.4``, ``Neuron SDK 2.20`` or ``unknown``."""
        if self.cuda is not None:
            return f"CUDA {_short(self.cuda)}"
        if self.rocm is not None:
            return f"ROCm {_short(self.rocm)}"
        if self.neuron_sdk is not None:
            return f"Neuron SDK {_short(self.neuron_sdk)}"
        return "unknown"


def _short(version: Version) -> str:
    return ".".join(str(part) for part in version[:2])


def _python(digits: str) -> str:
    """``"312"`` or ``"3.12"`` -> ``"3.12"``."""
    return digits if "." in digits else f"{digits[0]}.{digits[1:]}"


def _cu(digits: str) -> Version:
    """``"cu128"``-style digits -> (12, 8); ``"118"`` -> (11, 8)."""
    return (int(digits[:-1]), int(digits[-1]))


_PYTORCH = re.compile(
    r"^(?:docker\.io/|ghcr\.io/)?pytorch/pytorch:(?P<torch>\d+\.\d+\.\d+)-cuda(?P<cuda>\d+\.\d+)"
    r"-cudnn(?P<cudnn>\d+)-(?P<flavor>runtime|devel)$"
)
_NGC = re.compile(r"^nvcr\.io/nvidia/pytorch:(?P<release>\d\d\.\d\d)-py3$")
_NVIDIA_CUDA = re.compile(
    r"^(?:docker\.io/|nvcr\.io/)?nvidia/cuda:(?P<cuda>\d+\.\d+(?:\.\d+)?)-(?:cudnn(?P<cudnn>\d*)-)?"
    r"(?P<flavor>base|runtime|devel)-(?P<os>ubuntu[\d.]+|rockylinux\d+|ubi\d+)$"
)
_AWS_DLC = re.compile(
    r"(?:^|/)pytorch-(?P<kind>training|inference):(?P<torch>\d+\.\d+(?:\.\d+)?)-gpu-py(?P<py>\d+)"
    r"-cu(?P<cu>\d{3})-(?P<os>ubuntu[\d.]+)-(?:ec2|sagemaker)"
)
_NEURON = re.compile(
    r"(?:^|/)pytorch-(?P<kind>training|inference)-neuronx:(?P<torch>\d+\.\d+(?:\.\d+)?)-neuronx-py(?P<py>\d+)"
    r"-sdk(?P<sdk>\d+\.\d+(?:\.\d+)?)-(?P<os>ubuntu[\d.]+)"
)
_ROCM = re.compile(
    r"^(?:docker\.io/)?rocm/pytorch:rocm(?P<rocm>\d+\.\d+(?:\.\d+)?)_(?P<os>ubuntu[\d.]+)_py(?P<py>\d+\.\d+)"
    r"_pytorch_(?:release_)?(?P<torch>\d+\.\d+(?:\.\d+)?)$"
)
_ANY_CUDA = re.compile(r"(?:cuda|cu)[-_]?(?P<major>1[0-9])\.(?P<minor>\d)(?!\d)|[-_.]cu(?P<digits>1[0-9]\d)(?!\d)")
_ANY_ROCM = re.compile(r"rocm[-_]?(?P<version>\d+\.\d+)")


def parse_image(reference: str) -> ImageInfo:
    """Everything a reference says; ``platform == "unknown"`` when it says nothing."""
    ref = reference.strip()
    if match := _PYTORCH.match(ref):
        return ImageInfo(
            ref, "pytorch", "cuda", "pytorch", parse_version(match["torch"]), parse_version(match["cuda"]),
            int(match["cudnn"]), flavor=match["flavor"],
        )  # fmt: skip
    if match := _NGC.match(ref):
        release = NGC_PYTORCH_RELEASES.get(match["release"])
        if release is None:  # a month we have no notes for: the framework is known, CUDA is not
            return ImageInfo(ref, "ngc", "cuda", "pytorch", flavor="devel")
        cuda, torch = release
        return ImageInfo(
            ref, "ngc", "cuda", "pytorch", parse_version(torch), parse_version(cuda)[:2], 9, flavor="devel"
        )  # fmt: skip
    if match := _NVIDIA_CUDA.match(ref):
        cudnn = match["cudnn"]
        return ImageInfo(
            ref, "nvidia-cuda", "cuda", None, None, parse_version(match["cuda"])[:2],
            int(cudnn) if cudnn else (9 if cudnn == "" else None), flavor=match["flavor"], os=match["os"],
        )  # fmt: skip
    if match := _NEURON.search(ref):
        return ImageInfo(
            ref, "neuron", "neuron", "pytorch", parse_version(match["torch"]),
            neuron_sdk=parse_version(match["sdk"]), flavor=match["kind"], python=_python(match["py"]),
            os=match["os"],
        )  # fmt: skip
    if match := _AWS_DLC.search(ref):
        return ImageInfo(
            ref, "aws-dlc", "cuda", "pytorch", parse_version(match["torch"]), _cu(match["cu"]),
            flavor=match["kind"], python=_python(match["py"]), os=match["os"],
        )  # fmt: skip
    if match := _ROCM.match(ref):
        return ImageInfo(
            ref, "rocm", "rocm", "pytorch", parse_version(match["torch"]), rocm=parse_version(match["rocm"]),
            flavor="devel", python=match["py"], os=match["os"],
        )  # fmt: skip
    tag = ref.rsplit("/", 1)[-1]
    if (match := _ANY_CUDA.search(tag)) is not None:
        found = _cu(match["digits"]) if match["digits"] else (int(match["major"]), int(match["minor"]))
        return ImageInfo(ref, "other", "cuda", cuda=found)
    if (match := _ANY_ROCM.search(tag)) is not None:
        return ImageInfo(ref, "other", "rocm", rocm=parse_version(match["version"]))
    if "neuron" in tag:
        return ImageInfo(ref, "other", "neuron")
    return ImageInfo(ref, "other", "unknown")

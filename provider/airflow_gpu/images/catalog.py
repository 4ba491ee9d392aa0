"""The image catalog: real, published tags only, as data.

Each reference below was found in public use (Dockerfiles, manifests, docs) before it went in;
no registry could be reached from here to list tags. Metadata is not typed in by hand but
read from the reference by ``tags.parse_image`` (NGC's CUDA comes from its release table there).
To add an image, add its reference.
"""

from __future__ import annotations

from functools import cache

from airflow_gpu.images.cuda import parse_version
from airflow_gpu.images.tags import NGC_PYTORCH_RELEASES, ImageInfo, parse_image

#: Docker Hub ``pytorch/pytorch``: the CUDA builds of each release, each as runtime and devel.
PYTORCH_DOCKERHUB: dict[str, tuple[str, ...]] = {
    "2.1.2": ("12.1",),
    "2.3.1": ("12.1",),
    "2.4.1": ("12.1", "12.4"),
    "2.5.1": ("12.1", "12.4"),
    "2.6.0": ("12.4", "12.6"),
    "2.7.1": ("11.8", "12.6", "12.8"),
    "2.8.0": ("12.8", "12.9"),
    "2.9.1": ("12.8", "13.0"),
    "2.10.0": ("12.6", "12.8", "13.0"),
}

#: ``nvidia/cuda`` base images with cuDNN (no framework), runtime and devel.
NVIDIA_CUDA_TAGS: tuple[str, ...] = (
    "11.8.0-cudnn8-{flavor}-ubuntu22.04",
    "12.1.1-cudnn8-{flavor}-ubuntu22.04",
    "12.2.2-cudnn8-{flavor}-ubuntu22.04",
    "12.3.2-cudnn9-{flavor}-ubuntu22.04",
    "12.4.1-cudnn-{flavor}-ubuntu22.04",
    "12.6.3-cudnn-{flavor}-ubuntu24.04",
    "12.8.1-cudnn-{flavor}-ubuntu24.04",
    "12.9.1-cudnn-{flavor}-ubuntu24.04",
    "13.0.0-cudnn-{flavor}-ubuntu24.04",
)

#: AWS Deep Learning Containers (us-east-1; the same tags exist in every DLC region).
AWS_DLC_REGISTRY = "763104351884.dkr.ecr.us-east-1.amazonaws.com"
AWS_DLC_TAGS: tuple[str, ...] = (
    "pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2",
    "pytorch-training:2.6.0-gpu-py312-cu126-ubuntu22.04-ec2",
    "pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2",
    "pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2",
)

#: AWS Neuron images for Trainium and Inferentia.
NEURON_IMAGES: tuple[str, ...] = (
    "public.ecr.aws/neuron/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04",
    "public.ecr.aws/neuron/pytorch-inference-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04",
    "763104351884.dkr.ecr.us-east-2.amazonaws.com/pytorch-training-neuronx:2.7.0-neuronx-py310-sdk2.24.1-ubuntu22.04",
    "public.ecr.aws/neuron/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04",
)

#: AMD ROCm PyTorch images.
ROCM_IMAGES: tuple[str, ...] = (
    "rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2",
    "rocm/pytorch:rocm6.2_ubuntu24.04_py3.12_pytorch_release_2.4.0",
    "rocm/pytorch:rocm6.4.1_ubuntu22.04_py3.10_pytorch_release_2.6.0",
    "rocm/pytorch:rocm6.4.4_ubuntu24.04_py3.12_pytorch_release_2.7.1",
)


def references() -> tuple[str, ...]:
    """Every image reference in the catalog."""
    refs = [
        f"pytorch/pytorch:{torch}-cuda{cuda}-cudnn{8 if parse_version(torch) < (2, 4) else 9}-{flavor}"
        for torch, cudas in PYTORCH_DOCKERHUB.items()
        for cuda in cudas
        for flavor in ("runtime", "devel")
    ]
    refs += [f"nvcr.io/nvidia/pytorch:{release}-py3" for release in NGC_PYTORCH_RELEASES]
    refs += [f"nvidia/cuda:{tag.format(flavor=flavor)}" for tag in NVIDIA_CUDA_TAGS for flavor in ("runtime", "devel")]
    refs += [f"{AWS_DLC_REGISTRY}/{tag}" for tag in AWS_DLC_TAGS]
    refs += [*NEURON_IMAGES, *ROCM_IMAGES]
    return tuple(refs)


@cache
def images() -> tuple[ImageInfo, ...]:
    """The catalog with the metadata of each image."""
    return tuple(parse_image(ref) for ref in references())


FAMILIES: tuple[str, ...] = ("pytorch", "ngc", "nvidia-cuda", "aws-dlc", "neuron", "rocm")

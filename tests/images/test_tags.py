"""Every tag format the catalog uses, and references outside the catalog, parsed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.images import catalog
from airflow_gpu.images.tags import parse_image

CASES = {
    "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime": ("pytorch", "cuda", (2, 7, 1), (12, 8), 9, "runtime", None),
    "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-devel": ("pytorch", "cuda", (2, 3, 1), (12, 1), 8, "devel", None),
    "nvcr.io/nvidia/pytorch:24.12-py3": ("ngc", "cuda", (2, 6, 0), (12, 6), 9, "devel", None),
    "nvcr.io/nvidia/pytorch:25.08-py3": ("ngc", "cuda", (2, 8, 0), (13, 0), 9, "devel", None),
    "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04": ("nvidia-cuda", "cuda", None, (12, 8), 9, "runtime", None),
    "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04": ("nvidia-cuda", "cuda", None, (11, 8), 8, "devel", None),
    "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04": ("nvidia-cuda", "cuda", None, (12, 4), None, "base", None),
    "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2": (
        "aws-dlc", "cuda", (2, 8, 0), (12, 9), None, "training", "3.12",
    ),
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker": (
        "aws-dlc", "cuda", (2, 5, 1), (12, 4), None, "inference", "3.11",
    ),
    "public.ecr.aws/neuron/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04": (
        "neuron", "neuron", (2, 1, 2), None, None, "training", "3.10",
    ),
    "rocm/pytorch:rocm6.4.4_ubuntu24.04_py3.12_pytorch_release_2.7.1": (
        "rocm", "rocm", (2, 7, 1), None, None, "devel", "3.12",
    ),
    "rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2": ("rocm", "rocm", (2, 1, 2), None, None, "devel", "3.10"),
}  # fmt: skip


@pytest.mark.parametrize(("reference", "expected"), CASES.items())
def test_each_tag_format(reference: str, expected: tuple[object, ...]) -> None:
    info = parse_image(reference)
    assert (
        info.family,
        info.platform,
        info.framework_version,
        info.cuda,
        info.cudnn,
        info.flavor,
        info.python,
    ) == (expected)


def test_stack_versions_of_rocm_and_neuron() -> None:
    assert parse_image("rocm/pytorch:rocm6.4.1_ubuntu22.04_py3.10_pytorch_release_2.6.0").rocm == (6, 4, 1)
    neuron = parse_image("public.ecr.aws/neuron/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04")
    assert (neuron.neuron_sdk, neuron.accelerator_stack) == ((2, 27, 1), "Neuron SDK 2.27")


@pytest.mark.parametrize(
    ("reference", "platform", "cuda"),
    [
        ("ghcr.io/acme/trainer:1.4-cuda12.4", "cuda", (12, 4)),
        ("registry.example.com/team/vllm:0.6.3-cu121", "cuda", (12, 1)),
        ("acme/rocm-bench:rocm6.2", "rocm", None),
        ("acme/neuron-serving:latest", "neuron", None),
        ("myorg/private:latest", "unknown", None),
        ("nvcr.io/nvidia/pytorch:19.01-py3", "cuda", None),  # an NGC month without release notes here
    ],
)
def test_references_outside_the_catalog(reference: str, platform: str, cuda: tuple[int, int] | None) -> None:
    info = parse_image(reference)
    assert (info.platform, info.cuda) == (platform, cuda)


def test_catalog_metadata_comes_from_its_references() -> None:
    images = catalog.images()
    assert len(images) == len({i.reference for i in images})
    assert all(i.family in catalog.FAMILIES for i in images)
    assert all(i.framework == "pytorch" for i in images if i.family != "nvidia-cuda")
    assert all(i.cuda for i in images if i.platform == "cuda")
    assert "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" in catalog.references()  # DESIGN.md
    assert "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime" in catalog.references()  # DESIGN.md
    assert {i.family for i in images} == set(catalog.FAMILIES)


@given(st.text(max_size=80))
def test_any_reference_parses(reference: str) -> None:
    info = parse_image(reference)
    assert info.platform in {"cuda", "rocm", "neuron", "unknown"}

"""``select_image``, ``validate_image`` and ``resolve_image`` against the real catalog."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu import Accelerator
from airflow_gpu.accelerators import catalog as accelerator_catalog
from airflow_gpu.images.selection import ImageError, resolve_image, select_image, validate_image
from airflow_gpu.images.tags import parse_image
from tests.properties import examples

NON_TPU = [e.name for e in accelerator_catalog.CATALOG if e.kind != "tpu"]


@pytest.mark.parametrize("name", NON_TPU)
def test_every_catalog_accelerator_gets_an_image_that_validates(name: str) -> None:
    choice = select_image(name)
    assert validate_image(choice.reference, name) == choice.image
    platform = {"nvidia": "cuda", "amd": "rocm", "aws": "neuron"}[Accelerator.parse(name).vendor]
    assert choice.image.platform == platform
    assert choice.reasons and choice.reference in {str(choice)}


def test_newest_image_wins() -> None:
    assert select_image("H100:8").reference == "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"
    assert select_image("H100:8", flavor="devel").reference == "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-devel"
    assert select_image("H100", framework_version="2.8").reference == "pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime"
    assert select_image("H100", cuda="12.6").reference == "pytorch/pytorch:2.10.0-cuda12.6-cudnn9-runtime"


def test_driver_limit() -> None:
    choice = select_image("H100", driver_version="535")
    assert choice.image.cuda is not None and choice.image.cuda <= (12, 2)
    assert "driver 535 supports CUDA <= 12.2" in choice.reasons
    # the newest framework first: torch 2.7.1 (CUDA 11.8) beats torch 2.6.0 (CUDA 12.4) on driver 550
    assert select_image("L4", driver_version="550.54.14").reference == "pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime"
    assert select_image("L4", driver_version="550.54.14", cuda="12").image.cuda == (12, 4)
    # with minor-version compatibility any 12.x runs on 535
    assert select_image("L4", driver_version="535", compatibility="minor-version").image.cuda == (12, 8)


def test_driver_error_says_why_and_what_would_match() -> None:
    with pytest.raises(ImageError) as caught:
        select_image("H100", framework_version="2.8", driver_version="535")
    message = str(caught.value)
    assert "driver 535 supports CUDA <= 12.2" in message
    assert "no pytorch 2.8 image" in message
    assert "Newest compatible: pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime" in message


def test_v100_never_gets_cuda_13() -> None:
    assert select_image("V100").image.cuda == (12, 8)
    with pytest.raises(ImageError, match="CUDA >= 9.0 and <= 12.x"):
        select_image("V100", cuda="13")
    with pytest.raises(ImageError, match="CUDA 13 dropped Volta .V100.; the image has CUDA 13.0"):
        validate_image("pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime", "V100:8")


def test_b200_needs_cuda_12_8() -> None:
    assert select_image("B200:8").image.cuda is not None
    assert all(select_image("B200", framework_version=v).image.cuda >= (12, 8) for v in ("2.7", "2.8", "2.9"))  # type: ignore[operator]
    with pytest.raises(ImageError) as caught:
        validate_image("pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime", "B200:8")
    message = str(caught.value)
    for part in (
        "B200",
        "Blackwell",
        "needs CUDA >= 12.8",
        "the image has CUDA 12.6",
        "replacement: pytorch/pytorch:2.",
    ):
        assert part in message
    with pytest.raises(ImageError, match="no pytorch 2.5 image"):
        select_image("B200", framework_version="2.5")


def test_neuron_images() -> None:
    trn2 = select_image("trn2:16")
    assert trn2.image.family == "neuron" and trn2.image.flavor == "training"
    assert trn2.image.neuron_sdk is not None and trn2.image.neuron_sdk >= (2, 21)
    assert select_image("inf2").image.flavor == "inference"
    with pytest.raises(ImageError, match="Trainium2 .NeuronCore-v3. needs an AWS Neuron image, SDK >= 2.21"):
        validate_image(
            "public.ecr.aws/neuron/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04", "trn2"
        )
    with pytest.raises(ImageError, match="is a CUDA image; Trainium needs an AWS Neuron image"):
        validate_image("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "trn1")


def test_rocm_images() -> None:
    assert select_image("MI300X:8").image.family == "rocm"
    with pytest.raises(ImageError, match="is a CUDA image; MI300X needs a ROCm image.*replacement: rocm/pytorch"):
        validate_image("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "MI300X")
    with pytest.raises(ImageError, match="is a ROCm image; H100 needs a CUDA image"):
        validate_image("rocm/pytorch:rocm6.2_ubuntu24.04_py3.12_pytorch_release_2.4.0", "H100")


def test_registries() -> None:
    assert select_image("H100", registry="ngc").reference == "nvcr.io/nvidia/pytorch:25.08-py3"
    assert select_image("H100", registry="aws-dlc").image.family == "aws-dlc"
    assert select_image("H100", framework="none").reference == "nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04"
    with pytest.raises(ImageError, match="registry 'rocm' has no pytorch images for H100; use one of: dockerhub"):
        select_image("H100", registry="rocm")
    with pytest.raises(ImageError, match="registry 'quay' is not one of"):
        select_image("H100", registry="quay")
    with pytest.raises(ImageError, match="no TPU images"):
        select_image("TPU-v5p:4")
    with pytest.raises(
        ImageError,
        match=r"535 supports CUDA <= 12.2. Newest compatible in another registry: "
        r"pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime \(registry='dockerhub'\)",
    ):
        select_image("H100", registry="ngc", driver_version="535")  # NGC images all need CUDA >= 12.6
    with pytest.raises(ImageError, match="No catalog image is compatible; pass a compatible image reference"):
        select_image("H100", driver_version="470")
    with pytest.raises(ImageError, match="driver_version 'new' is not a driver version"):
        select_image("H100", driver_version="new")


def test_unreadable_images_are_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="airflow_gpu.images.selection"):
        info = validate_image("registry.example.com/team/trainer:v42", "H100:8")
    assert info.platform == "unknown"
    assert "accepting it for H100:8 unchecked" in caplog.text


def test_resolve_image_for_operators() -> None:
    assert resolve_image("auto", "H100:8") == "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"
    assert resolve_image("auto", "H100", driver_version="535", framework_version="2.7").startswith(
        "pytorch/pytorch:2.7.1-"
    )
    assert resolve_image("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "H100") == (
        "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
    )
    # A task without an accelerator is never pushed into a CUDA image.
    assert resolve_image("python:3.12-slim", None) == "python:3.12-slim"
    with pytest.raises(ImageError, match="a task without an accelerator needs an image reference"):
        resolve_image("auto", None)
    with pytest.raises(ImageError, match="cannot run on B200"):
        resolve_image("pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime", "B200")


_DRIVERS = st.sampled_from([None, "470", "520.61.05", "525", "535", "535.104.05", "550.54.14", "560", "570.26", "580"])


@settings(max_examples=examples(300), deadline=None)
@given(
    name=st.sampled_from(NON_TPU),
    driver=_DRIVERS,
    framework_version=st.sampled_from([None, "2.1", "2.4", "2.6", "2.7", "2.8", "2.9", "2.10"]),
    cuda=st.sampled_from([None, "11", "12", "12.4", "12.8", "13"]),
    flavor=st.sampled_from(["runtime", "devel", "training", "inference"]),
    registry=st.sampled_from([None, "dockerhub", "ngc", "aws-dlc", "neuron", "rocm"]),
    compatibility=st.sampled_from(["strict", "minor-version"]),
)
def test_select_never_returns_an_image_validate_rejects(
    name: str, driver: str | None, framework_version: str | None, cuda: str | None, flavor: str,
    registry: str | None, compatibility: str,
) -> None:  # fmt: skip
    try:
        choice = select_image(
            name, framework_version=framework_version, cuda=cuda, driver_version=driver, flavor=flavor,
            registry=registry, compatibility=compatibility,  # type: ignore[arg-type]
        )  # fmt: skip
    except ImageError:
        return
    assert validate_image(choice.reference, name, driver, compatibility) == parse_image(choice.reference)  # type: ignore[arg-type]

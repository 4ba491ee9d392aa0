"""Which ENTRYPOINTs the profiler's wrapper may pass through (``images.entrypoint``)."""

from __future__ import annotations

import pytest

from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.images.entrypoint import EXECS_ARGUMENTS, check_entrypoint, decide, passes_arguments_on


@pytest.mark.parametrize(
    "entrypoint",
    [
        [],
        ["/opt/nvidia/nvidia_entrypoint.sh"],
        ["/usr/local/bin/docker-entrypoint.sh"],
        ["docker-entrypoint.sh"],
        ["tini", "--"],
        ["/usr/bin/tini", "--"],
        ["/sbin/tini", "-g", "--"],
        ["dumb-init", "--"],
        ["/usr/bin/dumb-init"],
    ],
)
def test_entrypoints_that_run_their_arguments_are_wrapped(entrypoint: list[str]) -> None:
    assert passes_arguments_on(entrypoint)
    assert decide("img", entrypoint).wrap


@pytest.mark.parametrize(
    "entrypoint",
    [
        ["python", "train.py"],
        ["accelerate", "launch"],
        ["bash", "-m", "start_with_right_hostname.sh"],  # SageMaker DLCs: eval "$@" would mangle the wrapper
        ["/opt/nvidia/nvidia_entrypoint.sh", "python"],
        ["tini", "--", "python", "serve.py"],
        ["/bin/sh", "-c", "python train.py"],
    ],
)
def test_any_other_entrypoint_is_not_wrapped_and_the_note_says_how_to_profile(entrypoint: list[str]) -> None:
    decision = decide("team/train:1", entrypoint)
    assert not decision.wrap
    assert decision.note is not None and str(entrypoint) in decision.note and "team/train:1" in decision.note
    assert 'exec "$@"' in decision.note and EXECS_ARGUMENTS in decision.note


def test_an_unknown_entrypoint_is_not_wrapped() -> None:
    decision = decide("private/img:1", None, "HTTP 401")
    assert not decision.wrap and decision.note is not None and "HTTP 401" in decision.note


def test_image_entrypoint_is_checked_at_parse_time() -> None:
    assert check_entrypoint(["python", "x.py"]) == ("python", "x.py")
    assert check_entrypoint([]) == () and check_entrypoint(EXECS_ARGUMENTS) == EXECS_ARGUMENTS
    with pytest.raises(AcceleratorSpecError, match="image_entrypoint"):
        check_entrypoint("python train.py")


def test_a_catalog_image_whose_config_cannot_be_read_is_known_by_its_family() -> None:
    assert decide("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", None, "no network").wrap
    assert decide("nvcr.io/nvidia/pytorch:25.01-py3", None, "no network").wrap
    assert decide("huggingface/accelerate:gpu-release-1.15.0", None, "no network").wrap  # the docs' choice
    assert not decide("registry.example.com/pytorch/pytorch:1", None, "no network").wrap

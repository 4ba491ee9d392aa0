"""``GPUBatchOperator`` profiling images whose ENTRYPOINT, or lack of a shell, the wrapper must respect
(issue 25, behaviour 4 and the distroless part of 8), against the AWS Batch emulator.

The emulator runs an image as Docker does (``testing.images``): its ENTRYPOINT receives the job's
command as arguments (Batch's ``command`` is Docker's CMD; ``ContainerProperties`` has no
``entryPoint``), and a program the image lacks fails the container's start with Docker's
``CannotStartContainerError``. The operator reads each image's config through the emulator's
registry mirror (``registry_mirror`` in ``aws_default``'s extra), as it reads Docker Hub or ECR.
``Ti`` and ``Store`` stand in for Airflow's task instance and task state store.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from airflow_gpu.images import registry
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.images import Image, distroless
from tests.operators.conftest import LOG_LAG
from tests.operators.task_context import Store, Ti

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
#: ``train.py`` of an image built ``ENTRYPOINT ["python", "train.py"]``: it parses its own arguments.
TRAIN = """import argparse, json
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()
print("::airflow-gpu-result::" + json.dumps({"epochs": args.epochs}))
"""
#: NGC's ``/opt/nvidia/nvidia_entrypoint.sh``, in short: a banner, then ``exec "$@"``.
NVIDIA_ENTRYPOINT = '#!/bin/sh\necho "== CUDA =="\nexec "$@"\n'
RESULT_LINE = '::airflow-gpu-result::{"loss": 0.25}\n'


@pytest.fixture(autouse=True)
def fresh_registry_reads() -> None:
    registry.forget()  # each test's emulator is a new mirror with new images


def operator(image: str, command: list[str], **kwargs: Any) -> GPUBatchOperator:
    return GPUBatchOperator(
        task_id="train", accelerator="A10G:1", job_queues=QUEUES, image=image, command=command,
        poll_interval=0.2, awslogs_fetch_interval=0.5, log_lag=LOG_LAG, spot={"capacity_timeout": 30}, **kwargs,
    )  # fmt: skip


def described(emulator: BatchEmulator) -> list[dict[str, Any]]:
    ids = [job.job_id for job in emulator.jobs()]
    jobs = emulator.client("batch").describe_jobs(jobs=ids)["jobs"] if ids else []
    return sorted(jobs, key=lambda j: j["createdAt"])


def test_an_image_whose_entrypoint_is_the_program_runs_unwrapped_with_a_note(
    aws_default_connection: BatchEmulator,
) -> None:
    """ENTRYPOINT ["python", "train.py"]: the wrapper would arrive as train.py's arguments (argparse
    exits 2). The job runs the command as given; the profile's note names the ENTRYPOINT."""
    emulator, image = aws_default_connection, "registry.example.com/team/train:1"
    emulator.declare_image(image, Image(entrypoint=(sys.executable, "/opt/train.py"), files={"/opt/train.py": TRAIN}))
    ti = Ti()
    assert operator(image, ["--epochs", "2"]).execute({"ti": ti, "task_state_store": Store()}) == {"epochs": 2}
    (job,) = described(emulator)
    assert job["status"] == "SUCCEEDED" and job["container"]["command"] == ["--epochs", "2"]
    note = ti.xcom["gpu_profile"]["note"]
    assert "ENTRYPOINT" in note and "/opt/train.py" in note and image in note
    assert ti.xcom["gpu_interruptions"] == []


def test_an_entrypoint_that_execs_its_arguments_is_still_profiled(aws_default_connection: BatchEmulator) -> None:
    """NGC's entrypoint ends in exec "$@": the wrapped command runs through it, and is profiled."""
    emulator, image = aws_default_connection, "nvcr.io/nvidia/pytorch:25.01-py3"
    path = "/opt/nvidia/nvidia_entrypoint.sh"
    emulator.declare_image(image, Image(entrypoint=(path,), files={path: NVIDIA_ENTRYPOINT}))
    ti = Ti()
    result = operator(image, [sys.executable, "-c", f"print({RESULT_LINE.strip()!r})"]).execute(
        {"ti": ti, "task_state_store": Store()}
    )
    assert result == {"loss": 0.25}
    (job,) = described(emulator)
    assert job["container"]["command"][:2] == ["/bin/sh", "-c"]  # wrapped
    assert "ENTRYPOINT" not in str(ti.xcom["gpu_profile"].get("note"))
    assert ti.xcom["gpu_profile"]["exit_code"] == 0  # the profiler's own report: it ran the command


def test_a_distroless_image_runs_unprofiled_after_its_start_failures_with_a_note(
    aws_default_connection: BatchEmulator,
) -> None:
    """No /bin/sh, no python3: each wrapper form fails to start (Docker's "exec: ... not found"), and
    the job is submitted again in the next form, then unprofiled; no start failure is an interruption."""
    emulator, image = aws_default_connection, "gcr.io/distroless/static-debian12:nonroot"
    emulator.declare_image(image, distroless())
    ti = Ti()
    result = operator(image, ["printf", RESULT_LINE]).execute({"ti": ti, "task_state_store": Store()})
    assert result == {"loss": 0.25}
    first, second, third = described(emulator)
    for failed, program in ((first, '"/bin/sh"'), (second, '"python3"')):
        assert failed["status"] == "FAILED"
        assert failed["attempts"][-1]["container"]["reason"].startswith("CannotStartContainerError")
        assert program in failed["attempts"][-1]["container"]["reason"]
    assert third["status"] == "SUCCEEDED" and third["container"]["command"] == ["printf", RESULT_LINE]
    assert [j["jobQueue"].rsplit("/", 1)[-1] for j in (first, second, third)] == ["gpu-spot"] * 3
    assert "neither /bin/sh nor python3" in ti.xcom["gpu_profile"]["note"]
    assert ti.xcom["gpu_interruptions"] == []


def test_a_distroless_image_with_python_is_profiled_through_python3(aws_default_connection: BatchEmulator) -> None:
    """gcr.io/distroless/python3 has python3 but no shell: the second form starts the profiler."""
    emulator, image = aws_default_connection, "gcr.io/distroless/python3-debian12:latest"
    emulator.declare_image(image, distroless(python=True))
    ti = Ti()
    result = operator(image, ["printf", RESULT_LINE]).execute({"ti": ti, "task_state_store": Store()})
    assert result == {"loss": 0.25}
    first, second = described(emulator)
    assert '"/bin/sh"' in first["attempts"][-1]["container"]["reason"]
    assert second["status"] == "SUCCEEDED" and second["container"]["command"][:2] == ["python3", "-c"]
    assert ti.xcom["gpu_profile"]["exit_code"] == 0
    assert ti.xcom["gpu_interruptions"] == []


def test_an_unreadable_image_config_runs_unwrapped(
    aws_default_connection: BatchEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker cannot read the config (a private registry, no network): the ENTRYPOINT is unknown
    and the job runs as it would unprofiled, the note saying how to profile it."""
    import json

    connection = aws_default_connection.airflow_connection()
    connection["extra"]["registry_mirror"] = "http://127.0.0.1:9"  # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    ti = Ti()
    op = operator("registry.example.com/team/private:1", ["printf", RESULT_LINE])
    assert op.execute({"ti": ti, "task_state_store": Store()}) == {"loss": 0.25}
    (job,) = described(aws_default_connection)
    assert job["container"]["command"] == ["printf", RESULT_LINE]
    assert "image_entrypoint" in ti.xcom["gpu_profile"]["note"]


def test_image_entrypoint_declares_what_the_registry_cannot_tell(aws_default_connection: BatchEmulator) -> None:
    """``image_entrypoint="execs-arguments"``: the wrapper goes through the user's own entrypoint."""
    emulator, image = aws_default_connection, "registry.example.com/team/custom:1"
    path = "/usr/local/bin/start.sh"
    emulator.declare_image(image, Image(entrypoint=(path,), files={path: NVIDIA_ENTRYPOINT}))
    ti = Ti()
    op = operator(image, ["printf", RESULT_LINE], image_entrypoint="execs-arguments")
    assert op.execute({"ti": ti, "task_state_store": Store()}) == {"loss": 0.25}
    (job,) = described(emulator)
    assert job["container"]["command"][:2] == ["/bin/sh", "-c"]
    assert ti.xcom["gpu_profile"]["exit_code"] == 0

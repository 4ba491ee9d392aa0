"""The official ``BatchOperator`` runs against the Batch emulator through ``airflow dags test``, with
``aws_default`` pointed at it by its ``endpoint_url`` extra exactly as at a real account: to
completion with the job's CloudWatch lines in the task log, failing with the container's exit
code, and deferrable, its ``BatchJobTrigger`` polling the emulator from the triggerer."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator

pytestmark = pytest.mark.slow

Airflow = Callable[..., subprocess.CompletedProcess[str]]


def run(airflow: Airflow, emulator: BatchEmulator, **env: str) -> subprocess.CompletedProcess[str]:
    emulator.client("batch").register_job_definition(
        jobDefinitionName="gpu-smoke",
        type="container",
        containerProperties={
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["true"],
            "resourceRequirements": [
                {"type": "GPU", "value": "1"},
                {"type": "VCPU", "value": "4"},
                {"type": "MEMORY", "value": "15000"},
            ],
        },
    )
    return airflow(
        "dags", "test", "batch_on_emulator", AIRFLOW_CONN_AWS_DEFAULT=emulator.airflow_connection_uri(), **env
    )


def jobs(emulator: BatchEmulator) -> list[dict[str, object]]:
    batch = emulator.client("batch")
    ids = [job.job_id for job in emulator.jobs()]
    return list(batch.describe_jobs(jobs=ids)["jobs"]) if ids else []


def test_batch_operator_runs_a_gpu_job(airflow: Airflow, batch_emulator: BatchEmulator) -> None:
    result = run(airflow, batch_emulator)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "line-one on gpu-spot-ce" in result.stdout and "line-two" in result.stdout
    [job] = jobs(batch_emulator)
    assert job["status"] == "SUCCEEDED" and job["jobName"] == "smoke"


def test_batch_operator_fails_with_the_exit_code(airflow: Airflow, batch_emulator: BatchEmulator) -> None:
    result = run(airflow, batch_emulator, BATCH_EXIT="3")
    assert result.returncode != 0
    [job] = jobs(batch_emulator)
    assert job["status"] == "FAILED" and job["container"]["exitCode"] == 3  # type: ignore[index]
    assert "Essential container in task exited" in result.stdout


def test_deferrable_batch_operator(airflow: Airflow, batch_emulator: BatchEmulator) -> None:
    result = run(airflow, batch_emulator, BATCH_DEFERRABLE="1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Pausing task as DEFERRED" in result.stdout
    [job] = jobs(batch_emulator)
    assert job["status"] == "SUCCEEDED"

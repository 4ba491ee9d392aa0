"""Helpers the Batch emulator tests share: they talk to it through boto3 only, as a client of AWS does."""

from __future__ import annotations

from typing import Any

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for

DEFAULT_GROUP = "/aws/batch/job"


def register(
    batch: Any,
    name: str,
    command: list[str],
    gpus: int = 1,
    retry: dict[str, Any] | None = None,
    log_configuration: dict[str, Any] | None = None,
) -> str:
    properties: dict[str, Any] = {
        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        "command": command,
        "environment": [{"name": "FROM_DEFINITION", "value": "yes"}],
        "resourceRequirements": [
            {"type": "GPU", "value": str(gpus)},
            {"type": "VCPU", "value": "4"},
            {"type": "MEMORY", "value": "15000"},
        ],
    }
    if log_configuration is not None:
        properties["logConfiguration"] = log_configuration
    answer = batch.register_job_definition(
        jobDefinitionName=name,
        type="container",
        containerProperties=properties,
        **({"retryStrategy": retry} if retry else {}),
    )
    return str(answer["jobDefinitionArn"])


def describe(batch: Any, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = batch.describe_jobs(jobs=[job_id])["jobs"][0]
    return job


def final(batch: Any, job_id: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(
        lambda: (job := describe(batch, job_id))["status"] in ("SUCCEEDED", "FAILED") and job,
        timeout,
        f"job {job_id} to finish",
    )


def status_is(batch: Any, job_id: str, status: str) -> Any:
    return wait_for(lambda: (job := describe(batch, job_id))["status"] == status and job, 60, f"{job_id} {status}")


def log_lines(emulator: BatchEmulator, stream: str, group: str = DEFAULT_GROUP) -> list[str]:
    events = emulator.client("logs").get_log_events(logGroupName=group, logStreamName=stream)["events"]
    return [e["message"] for e in events]


def logged(emulator: BatchEmulator, stream: str, count: int, group: str = DEFAULT_GROUP) -> list[str]:
    """The stream's lines once ``count`` of them are readable (CloudWatch ingests with a delay)."""
    return wait_for(
        lambda: len(lines := log_lines(emulator, stream, group)) >= count and lines, 15, f"{count} lines in {stream}"
    )

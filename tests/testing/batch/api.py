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


def launched(batch: Any, node_id: str, status: str = "RUNNING") -> dict[str, Any]:
    """An MNP node (``<jobId>#<n>``) once it has ``status``: DescribeJobs knows a node only once launched."""
    return wait_for(
        lambda: [job for job in batch.describe_jobs(jobs=[node_id])["jobs"] if job["status"] == status],
        60,
        f"{node_id} {status}",
    )[0]


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


def node_container(command: list[str], environment: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A node range's ``container``: what every node group of an MNP job definition needs (image, vCPU, memory)."""
    return {
        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        "command": command,
        "environment": [{"name": k, "value": v} for k, v in (environment or {}).items()],
        "resourceRequirements": [{"type": "VCPU", "value": "2"}, {"type": "MEMORY", "value": "4096"}],
        **extra,
    }


def register_multinode(
    batch: Any,
    name: str,
    ranges: dict[str, dict[str, Any]],
    num_nodes: int = 2,
    main_node: int = 0,
    retry: dict[str, Any] | None = None,
) -> str:
    """A ``multinode`` job definition: ``ranges`` maps each ``targetNodes`` to its container."""
    answer = batch.register_job_definition(
        jobDefinitionName=name,
        type="multinode",
        nodeProperties={
            "numNodes": num_nodes,
            "mainNode": main_node,
            "nodeRangeProperties": [{"targetNodes": t, "container": c} for t, c in ranges.items()],
        },
        **({"retryStrategy": retry} if retry else {}),
    )
    return str(answer["jobDefinitionArn"])

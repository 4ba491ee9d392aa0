"""Job output in CloudWatch Logs as AWS Batch and CloudWatch deliver it.

Ingestion lags: a job can be SUCCEEDED while its last lines are not yet readable. The job
definition's ``logConfiguration`` picks the group and stream ("Use the awslogs log driver", AWS
Batch User Guide), and the amazon provider's ``BatchClientHook.get_job_all_awslogs_info`` finds
them from DescribeJobs alone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import LOG_INGESTION_DELAY, BatchEmulator
from airflow_gpu.testing.polling import wait_for
from tests.testing.batch.api import DEFAULT_GROUP, describe, final, log_lines, logged, register


@pytest.fixture
def hook(emulator: BatchEmulator, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The amazon provider's hook on an Airflow connection to the emulator (``endpoint_url`` extra)."""
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    monkeypatch.setenv("AIRFLOW_CONN_BATCH_EMULATOR", json.dumps(emulator.airflow_connection()))
    return BatchClientHook(aws_conn_id="batch_emulator")


def run(batch: Any, name: str, command: list[str], log_configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    definition = register(batch, name, command, log_configuration=log_configuration)
    return final(batch, batch.submit_job(jobName=name, jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"])


def task_id(job: dict[str, Any]) -> str:
    return str(job["attempts"][-1]["container"]["taskArn"].rsplit("/", 1)[-1])


def test_a_job_succeeds_before_its_last_line_is_readable() -> None:
    """With the emulator's default lag, as a user's fixture gets it (the module's emulator lags less)."""
    with BatchEmulator() as emulator:
        assert emulator.log_ingestion_delay == LOG_INGESTION_DELAY > 1
        batch, logs = emulator.client("batch"), emulator.client("logs")
        definition = register(batch, "last-line", ["sh", "-c", "echo first; echo the final line"])
        job_id = batch.submit_job(jobName="last-line", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
        job = wait_for(
            lambda: (j := describe(batch, job_id))["status"] in ("SUCCEEDED", "FAILED") and j, 60, interval=0.01
        )
        stream = job["container"]["logStreamName"]
        read = log_lines(emulator, stream)
        filtered = logs.filter_log_events(logGroupName=DEFAULT_GROUP, logStreamNames=[stream])["events"]
        assert job["status"] == "SUCCEEDED"
        assert "the final line" not in read and filtered == []  # SUCCEEDED, and CloudWatch has not got it yet
        assert logged(emulator, stream, 2) == ["first", "the final line"]  # a few seconds later, in order
        filtered = logs.filter_log_events(logGroupName=DEFAULT_GROUP, logStreamNames=[stream])["events"]
        assert [e["message"] for e in filtered] == ["first", "the final line"]


def test_without_the_delay_lines_are_readable_at_once() -> None:
    with BatchEmulator(log_ingestion_delay=0) as emulator:
        batch = emulator.client("batch")
        job = run(batch, "at-once", ["sh", "-c", "echo one; echo two"])
        assert log_lines(emulator, job["container"]["logStreamName"]) == ["one", "two"]


def test_a_custom_group_and_stream_prefix(emulator: BatchEmulator, batch: Any, hook: Any) -> None:
    configuration = {
        "logDriver": "awslogs",
        "options": {"awslogs-group": "/my/group", "awslogs-stream-prefix": "x", "awslogs-create-group": "true"},
    }
    job = run(batch, "custom-logs", ["echo", "to my group"], configuration)
    assert job["status"] == "SUCCEEDED"
    stream = f"x/default/{task_id(job)}"  # prefix-name/default/ecs-task-id
    assert job["container"]["logConfiguration"] == configuration
    assert job["container"]["logStreamName"] == job["attempts"][0]["container"]["logStreamName"] == stream
    assert logged(emulator, stream, 1, group="/my/group") == ["to my group"]
    assert hook.get_job_all_awslogs_info(job["jobId"]) == [
        {"awslogs_stream_name": stream, "awslogs_group": "/my/group", "awslogs_region": emulator.region}
    ]


def test_an_existing_group_without_a_prefix_keeps_the_default_stream_name(emulator: BatchEmulator, batch: Any) -> None:
    emulator.client("logs").create_log_group(logGroupName="/team/jobs")
    configuration = {"logDriver": "awslogs", "options": {"awslogs-group": "/team/jobs"}}
    job = run(batch, "team-job", ["echo", "hello team"], configuration)
    stream = f"team-job/default/{task_id(job)}"
    assert job["status"] == "SUCCEEDED" and job["container"]["logStreamName"] == stream
    assert logged(emulator, stream, 1, group="/team/jobs") == ["hello team"]


def test_a_missing_group_that_may_not_be_created_fails_the_start(batch: Any) -> None:
    configuration = {"logDriver": "awslogs", "options": {"awslogs-group": "/no/such/group"}}
    job = run(batch, "no-group", ["echo", "never"], configuration)
    assert job["status"] == "FAILED" and job["statusReason"] == "Task failed to start"
    [attempt] = job["attempts"]
    assert attempt["container"]["reason"] == (
        "CannotStartContainerError: Error response from daemon: failed to initialize logging driver: failed to "
        "create Cloudwatch log stream: ResourceNotFoundException: The specified log group does not exist."
    )
    assert "exitCode" not in attempt["container"] and "logStreamName" not in attempt["container"]
    assert "logStreamName" not in job["container"]


def test_another_log_driver_sends_nothing_to_cloudwatch(emulator: BatchEmulator, batch: Any, hook: Any) -> None:
    configuration = {"logDriver": "json-file", "options": {}}
    job = run(batch, "json-file", ["echo", "stays on the host"], configuration)
    assert job["status"] == "SUCCEEDED" and job["container"]["logConfiguration"] == configuration
    assert "logStreamName" not in job["container"] and "logStreamName" not in job["attempts"][0]["container"]
    streams = emulator.client("logs").describe_log_streams(logGroupName=DEFAULT_GROUP)["logStreams"]
    assert not [s for s in streams if s["logStreamName"].endswith(task_id(job))]
    assert hook.get_job_all_awslogs_info(job["jobId"]) == []  # "non-aws log drivers ... logging disabled"


def test_the_hook_reads_the_default_group_when_the_definition_names_none(
    emulator: BatchEmulator, batch: Any, hook: Any
) -> None:
    job = run(batch, "plain", ["echo", "plain"])
    assert "logConfiguration" not in job["container"]
    assert hook.get_job_all_awslogs_info(job["jobId"]) == [
        {
            "awslogs_stream_name": f"plain/default/{task_id(job)}",
            "awslogs_group": DEFAULT_GROUP,
            "awslogs_region": emulator.region,
        }
    ]

"""An injected throttle answers as AWS Batch does (HTTP 429, ``TooManyRequestsException``, "Too Many
Requests"), and the amazon provider's ``BatchClientHook.get_job_description`` gets through it by retrying."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.testing.batch.api import final, register

NO_RETRIES = {"mode": "standard", "total_max_attempts": 1}  # botocore would retry a 429 by itself


@pytest.fixture(scope="module")
def batch(emulator: BatchEmulator) -> Any:
    import boto3

    return boto3.client(
        "batch",
        endpoint_url=emulator.endpoint_url,
        region_name=emulator.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries=NO_RETRIES),
    )


@pytest.fixture(scope="module")
def job_id(batch: Any) -> str:
    definition = register(batch, "throttled", ["true"])
    job = final(
        batch, batch.submit_job(jobName="throttled", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    )
    return str(job["jobId"])


def test_the_next_calls_are_throttled_as_batch_throttles(emulator: BatchEmulator, batch: Any, job_id: str) -> None:
    emulator.throttle("DescribeJobs", times=3)
    assert emulator.faults[-1] == {"fault": "throttle", "operation": "DescribeJobs", "times": 3}
    assert batch.list_jobs(jobQueue="gpu-on-demand")["jobSummaryList"]  # other operations are not throttled
    for _ in range(3):
        with pytest.raises(ClientError) as error:
            batch.describe_jobs(jobs=[job_id])
        assert error.value.response["Error"] == {"Code": "TooManyRequestsException", "Message": "Too Many Requests"}
        assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] == "SUCCEEDED"


def test_the_amazon_hook_retries_through_a_throttle(
    emulator: BatchEmulator, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    connection = emulator.airflow_connection()
    connection["extra"]["config_kwargs"] = {"retries": NO_RETRIES}  # so that the hook's own retry is what helps
    monkeypatch.setenv("AIRFLOW_CONN_BATCH_EMULATOR", json.dumps(connection))
    hook = BatchClientHook(aws_conn_id="batch_emulator")
    pauses: list[float] = []
    monkeypatch.setattr(hook, "delay", pauses.append)  # the hook's back-off, recorded instead of slept
    emulator.throttle("DescribeJobs", times=2)
    assert hook.get_job_description(job_id)["status"] == "SUCCEEDED"
    assert len(pauses) == 2  # two throttled calls, two back-offs, then the answer


def test_only_batch_and_logs_operations_can_fail(emulator: BatchEmulator) -> None:
    with pytest.raises(ValueError, match="not an AWS Batch or CloudWatch Logs operation"):
        emulator.throttle("RunInstances")
    with pytest.raises(ValueError, match="unknown fault kind"):
        emulator.fail("SubmitJob", "teapot")


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [("server", "ServerException", 500), ("unavailable", "ServiceUnavailable", 503)],
)
def test_server_faults_answer_as_batch_does(
    emulator: BatchEmulator, batch: Any, kind: str, code: str, status: int
) -> None:
    """``ServerException`` (500) is in every Batch operation's error list; a front end sheds load with 503."""
    failed = emulator.fail("ListJobs", kind, times=1)
    with pytest.raises(ClientError) as error:
        batch.list_jobs(jobQueue="gpu-on-demand")
    assert error.value.response["Error"]["Code"] == code
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert failed.hits == 1 and batch.list_jobs(jobQueue="gpu-on-demand")["jobSummaryList"]


def test_a_dropped_connection_before_or_after_batch_acted(emulator: BatchEmulator, batch: Any) -> None:
    """``reset``: Batch never saw the SubmitJob; ``lost``: it created the job, and the answer never came."""
    from botocore.exceptions import ConnectionClosedError

    definition = register(batch, "dropped", ["true"])

    def named(name: str) -> list[Any]:
        return [j for j in emulator.jobs() if j.job_name == name]

    for kind, created in (("reset", 0), ("lost", 1)):
        emulator.fail("SubmitJob", kind)
        with pytest.raises(ConnectionClosedError):
            batch.submit_job(jobName=f"dropped-{kind}", jobQueue="gpu-on-demand", jobDefinition=definition)
        assert len(named(f"dropped-{kind}")) == created


def test_cloudwatch_logs_calls_fail_as_cloudwatch_logs_answers(emulator: BatchEmulator) -> None:
    import boto3

    logs = boto3.client(
        "logs", endpoint_url=emulator.endpoint_url, region_name=emulator.region, aws_access_key_id="testing",
        aws_secret_access_key="testing", config=Config(retries=NO_RETRIES),
    )  # fmt: skip
    logs.create_log_group(logGroupName="faulty")
    logs.create_log_stream(logGroupName="faulty", logStreamName="s")
    for kind, code in (("throttle", "ThrottlingException"), ("server", "ServiceUnavailableException")):
        emulator.fail("GetLogEvents", kind)
        with pytest.raises(ClientError) as error:
            logs.get_log_events(logGroupName="faulty", logStreamName="s")
        assert error.value.response["Error"]["Code"] == code
    assert logs.get_log_events(logGroupName="faulty", logStreamName="s")["events"] == []


def test_a_rate_fails_calls_at_random_repeatably(emulator: BatchEmulator, batch: Any) -> None:
    """``rate``: each call fails with that probability until ``times`` did; the same seed, the same calls."""

    def pattern(seed: int) -> list[bool]:
        armed = emulator.fail("ListJobs", "server", times=5, rate=0.4, seed=seed)
        failed: list[bool] = []
        while armed.hits < armed.times:
            try:
                batch.list_jobs(jobQueue="gpu-on-demand")
                failed.append(False)
            except ClientError:
                failed.append(True)
        return failed

    first, again = pattern(7), pattern(7)
    assert first == again and sum(first) == 5 and not all(first)

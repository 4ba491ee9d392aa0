"""The AWS Batch emulator through boto3, the way the amazon provider talks to AWS.

Jobs run as real local processes, their output lands in CloudWatch Logs (after the ingestion
delay, so the tests wait for lines as a client of AWS must), and faults (spot reclaim, no
capacity, termination) change what DescribeJobs reports exactly as on AWS.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from tests.testing.batch.api import describe, final, logged, register, status_is

SPOT_RETRY = {
    "attempts": 3,
    "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}, {"onReason": "*", "action": "EXIT"}],
}


def test_the_demo_account(batch: Any) -> None:
    queues = {q["jobQueueName"]: q for q in batch.describe_job_queues()["jobQueues"]}
    assert set(queues) == {"gpu-spot", "gpu-on-demand"}
    environments = {
        c["computeEnvironmentName"]: c for c in batch.describe_compute_environments()["computeEnvironments"]
    }
    assert environments["gpu-spot-ce"]["computeResources"]["type"] == "SPOT"
    assert environments["gpu-on-demand-ce"]["computeResources"]["type"] == "EC2"
    assert environments["gpu-spot-ce"]["computeResources"]["instanceTypes"] == ["g5", "g6", "p4d", "p5"]


def test_a_job_walks_through_the_states_runs_and_logs(emulator: BatchEmulator, batch: Any) -> None:
    definition = register(batch, "walk", ["sh", "-c", "echo job=$AWS_BATCH_JOB_ID attempt=$AWS_BATCH_JOB_ATTEMPT "
                                          "queue=$AWS_BATCH_JQ_NAME ce=$AWS_BATCH_CE_NAME def=$FROM_DEFINITION "
                                          "over=$OVERRIDDEN; sleep 0.3"])  # fmt: skip
    job_id = batch.submit_job(
        jobName="walk",
        jobQueue="gpu-spot",
        jobDefinition=definition,
        containerOverrides={"environment": [{"name": "OVERRIDDEN", "value": "1"}]},
    )["jobId"]
    seen = [describe(batch, job_id)["status"]]
    while seen[-1] not in ("SUCCEEDED", "FAILED"):
        status = describe(batch, job_id)["status"]
        if status != seen[-1]:
            seen.append(status)
        time.sleep(0.02)
    assert seen[0] == "SUBMITTED" and "RUNNABLE" in seen and "RUNNING" in seen and seen[-1] == "SUCCEEDED"
    job = describe(batch, job_id)
    [attempt] = job["attempts"]
    assert attempt["container"]["exitCode"] == 0 and attempt["statusReason"] == "Essential container in task exited"
    assert job["container"]["exitCode"] == 0
    assert job["container"]["logStreamName"] == attempt["container"]["logStreamName"]
    assert logged(emulator, attempt["container"]["logStreamName"], 1) == [
        f"job={job_id} attempt=1 queue=gpu-spot ce=gpu-spot-ce def=yes over=1"
    ]
    env = {e["name"] for e in job["container"]["environment"]}
    assert env == {"FROM_DEFINITION", "OVERRIDDEN"}  # no AWS_BATCH_JOB_ID piling up on each describe


def test_gpu_jobs_start_only_where_an_instance_type_has_the_gpus(batch: Any) -> None:
    definition = register(batch, "sixteen", ["true"], gpus=16)
    job_id = batch.submit_job(jobName="sixteen", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    job = wait_for(lambda: (j := describe(batch, job_id)).get("statusReason") and j, 30, "a RUNNABLE reason")
    assert job["status"] == "RUNNABLE"
    assert job["statusReason"] == (  # the AWS Batch User Guide's words: no numbers, no CE names
        "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement (vCPU/memory/GPU) is higher "
        "than that can be met by the CE(s) attached to the job queue."
    )
    batch.cancel_job(jobId=job_id, reason="no such instance")
    cancelled = final(batch, job_id)
    assert cancelled["status"] == "FAILED" and cancelled["statusReason"] == "no such instance"
    assert cancelled["attempts"] == []


def test_no_capacity_keeps_jobs_runnable_until_released(emulator: BatchEmulator, batch: Any) -> None:
    definition = register(batch, "stuck", ["true"], gpus=8)
    emulator.stall("gpu-spot-ce")
    try:
        job_id = batch.submit_job(jobName="stuck", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
        job = wait_for(lambda: (j := describe(batch, job_id)).get("statusReason") and j, 30, "a RUNNABLE reason")
        assert job["status"] == "RUNNABLE"
        assert job["statusReason"] == (
            "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for "
            "instance type p4d.24xlarge"  # the smallest spot type with 8 GPUs
        )
        other = batch.submit_job(jobName="other", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
        assert final(batch, other)["status"] == "SUCCEEDED"  # the on-demand environment has capacity
    finally:
        emulator.release("gpu-spot-ce")
    assert final(batch, job_id)["status"] == "SUCCEEDED"


def test_spot_reclaim_is_retried_by_batch_then_succeeds(emulator: BatchEmulator, batch: Any, tmp_path: Any) -> None:
    marker = tmp_path / "sigterm"
    script = (
        f"trap 'echo got SIGTERM; touch {marker}; exit 143' TERM; echo attempt $AWS_BATCH_JOB_ATTEMPT; "
        'if [ "$AWS_BATCH_JOB_ATTEMPT" = 1 ]; then while true; do sleep 0.1; done; fi; echo done'
    )
    definition = register(batch, "reclaimed", ["sh", "-c", script], retry=SPOT_RETRY)
    job_id = batch.submit_job(jobName="reclaimed", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    running = status_is(batch, job_id, "RUNNING")
    time.sleep(0.3)  # the trap is set
    instance = running["attempts"][0]["container"]["containerInstanceArn"].rsplit("/", 1)[-1]
    emulator.reclaim(job_id)
    job = final(batch, job_id)
    assert job["status"] == "SUCCEEDED" and marker.exists()
    first, second = job["attempts"]
    assert first["statusReason"] == f"Host EC2 (instance {instance}) terminated."
    assert first["container"]["exitCode"] == 143
    assert second["container"]["exitCode"] == 0
    assert logged(emulator, first["container"]["logStreamName"], 2) == ["attempt 1", "got SIGTERM"]
    assert logged(emulator, second["container"]["logStreamName"], 2) == ["attempt 2", "done"]
    assert emulator.faults[-1] == {"fault": "reclaim", "job": job_id, "instance": instance, "hard": False}


def test_a_hard_reclaim_leaves_no_exit_code_and_without_retries_fails(emulator: BatchEmulator, batch: Any) -> None:
    definition = register(batch, "hard", ["sleep", "60"])  # no retryStrategy: one attempt
    job_id = batch.submit_job(jobName="hard", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    status_is(batch, job_id, "RUNNING")
    emulator.reclaim(job_id, hard=True)
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"].startswith("Host EC2 (instance i-")
    assert "exitCode" not in job["attempts"][0]["container"]


def test_application_failure_is_not_retried_by_the_spot_strategy(batch: Any) -> None:
    definition = register(batch, "bug", ["sh", "-c", "echo boom; exit 3"], retry=SPOT_RETRY)
    job = final(batch, batch.submit_job(jobName="bug", jobQueue="gpu-spot", jobDefinition=definition)["jobId"])
    assert job["status"] == "FAILED" and len(job["attempts"]) == 1
    assert job["container"]["exitCode"] == 3 and job["statusReason"] == "Essential container in task exited"


def test_batch_retries_produce_several_attempts(batch: Any) -> None:
    definition = register(batch, "flaky", ["sh", "-c", "exit 1"], retry={"attempts": 3})
    job = final(batch, batch.submit_job(jobName="flaky", jobQueue="gpu-spot", jobDefinition=definition)["jobId"])
    assert job["status"] == "FAILED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [1, 1, 1]
    assert len({a["container"]["logStreamName"] for a in job["attempts"]}) == 3  # one stream per attempt


def test_terminate_sends_sigterm_then_fails(batch: Any, tmp_path: Any) -> None:
    marker = tmp_path / "terminated"
    definition = register(
        batch, "long", ["sh", "-c", f"trap 'touch {marker}; exit 143' TERM; while true; do sleep 0.1; done"]
    )
    job_id = batch.submit_job(jobName="long", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    status_is(batch, job_id, "RUNNING")
    time.sleep(0.3)
    batch.terminate_job(jobId=job_id, reason="Terminated by Airflow")
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"] == "Terminated by Airflow"
    assert job["attempts"][0]["container"]["exitCode"] == 143 and marker.exists()


def test_terminate_kills_a_job_that_ignores_sigterm(emulator: BatchEmulator, batch: Any) -> None:
    definition = register(batch, "stubborn", ["sh", "-c", "trap '' TERM; echo $$; while true; do sleep 0.1; done"])
    job_id = batch.submit_job(jobName="stubborn", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    status_is(batch, job_id, "RUNNING")
    stream = wait_for(lambda: describe(batch, job_id)["container"].get("logStreamName"), 10, "a stream")
    pid = int(logged(emulator, stream, 1)[0])
    batch.terminate_job(jobId=job_id, reason="stop")
    job = final(batch, job_id, timeout=30)
    assert job["attempts"][0]["container"]["exitCode"] == 137  # SIGKILL after stop_timeout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_array_jobs_and_dependencies(batch: Any) -> None:
    definition = register(batch, "shard", ["sh", "-c", "echo shard $AWS_BATCH_JOB_ARRAY_INDEX"])
    parent = batch.submit_job(
        jobName="shards", jobQueue="gpu-spot", jobDefinition=definition, arrayProperties={"size": 3}
    )
    after = batch.submit_job(
        jobName="reduce", jobQueue="gpu-spot", jobDefinition=definition, dependsOn=[{"jobId": parent["jobId"]}]
    )["jobId"]
    assert describe(batch, after)["status"] in ("SUBMITTED", "PENDING")
    job = final(batch, parent["jobId"])
    assert job["status"] == "SUCCEEDED" and job["arrayProperties"]["size"] == 3
    children = [final(batch, f"{parent['jobId']}:{i}") for i in range(3)]
    assert [c["arrayProperties"]["index"] for c in children] == [0, 1, 2]
    assert final(batch, after)["status"] == "SUCCEEDED"


def test_overrides_longer_than_ecs_takes_are_accepted_then_fail_the_job(batch: Any) -> None:
    """ECS caps a task's container overrides at 8,192 characters; Batch's SubmitJob (30 KiB) takes
    the job, which then fails without starting (ASFHyP3/hyp3#3041 shows the reason AWS gives)."""
    definition = register(batch, "long-overrides", ["true"])
    long = batch.submit_job(
        jobName="long", jobQueue="gpu-on-demand", jobDefinition=definition,
        containerOverrides={"command": ["echo", "x" * 9000]},
    )["jobId"]  # fmt: skip
    short = batch.submit_job(
        jobName="short", jobQueue="gpu-on-demand", jobDefinition=definition,
        containerOverrides={"command": ["echo", "x" * 8000]},
    )["jobId"]  # fmt: skip
    failed = final(batch, long)
    assert failed["status"] == "FAILED" and failed["attempts"] == []
    assert failed["statusReason"] == "Container Overrides length must be at most 8192"
    assert final(batch, short)["status"] == "SUCCEEDED"

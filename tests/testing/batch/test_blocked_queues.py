"""Stuck RUNNABLE jobs as the AWS Batch User Guide ("Jobs stuck in a RUNNABLE status") describes them.

Only the job at the head of a queue shows why the queue is blocked; the jobs behind it show no
``statusReason``. Without the service-role permissions to see capacity errors no capacity reason
appears at all. A queue's ``jobStateTimeLimitActions`` cancel the head once it has stayed blocked
with a matching reason for ``maxTimeSeconds`` (the emulator takes values under AWS's 600 s minimum).
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from airflow_gpu.testing.batch.compute import BatchSetup, ComputeEnvironmentSpec, QueueSpec
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from tests.testing.batch.api import describe, final, register

# slow: each case waits on the emulator's queue clocks (a head blocked for its time limit, reasons shown after a
# stall): seconds of waiting per test, which make test runs beside the rest and the inner loop skips
pytestmark = pytest.mark.slow

CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
JOB_RESOURCE = "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"
JOB_RESOURCE_MESSAGE = (
    "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement (vCPU/memory/GPU) is higher than "
    "that can be met by the CE(s) attached to the job queue."
)


def limit(reason: str, seconds: int) -> dict[str, Any]:
    return {"reason": reason, "state": "RUNNABLE", "maxTimeSeconds": seconds, "action": "CANCEL"}


def spot_queue(batch: Any, name: str, *actions: dict[str, Any]) -> str:
    """A queue of its own over the spot environment, so that each test has its own head."""
    batch.create_job_queue(
        jobQueueName=name,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": "gpu-spot-ce"}],
        **({"jobStateTimeLimitActions": list(actions)} if actions else {}),
    )
    return name


def submit(batch: Any, queue: str, gpus: int, count: int = 1) -> list[str]:
    definition = register(batch, f"needs-{gpus}", ["true"], gpus=gpus)
    return [
        batch.submit_job(jobName=f"job-{i}", jobQueue=queue, jobDefinition=definition)["jobId"] for i in range(count)
    ]


def reason_of(batch: Any, job_id: str) -> str:
    return str(wait_for(lambda: describe(batch, job_id).get("statusReason"), 30, f"a reason on {job_id}"))


def test_only_the_head_of_the_queue_shows_the_capacity_reason(batch: Any, stalled_spot: None) -> None:
    first, second, third = submit(batch, spot_queue(batch, "heads"), gpus=8, count=3)
    assert reason_of(batch, first) == (
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for instance type "
        "p4d.24xlarge"
    )
    behind = [describe(batch, job_id) for job_id in (second, third)]
    assert [(j["status"], j.get("statusReason")) for j in behind] == [("RUNNABLE", None), ("RUNNABLE", None)]
    batch.cancel_job(jobId=first, reason="make room")
    assert reason_of(batch, second).startswith(CAPACITY)  # the next one is the head now
    assert describe(batch, third).get("statusReason") is None
    for job_id in (second, third):
        batch.cancel_job(jobId=job_id, reason="done")


def test_misconfiguration_reasons_are_shown_on_the_head_only_too(batch: Any) -> None:
    first, second = submit(batch, spot_queue(batch, "too-big"), gpus=16, count=2)
    assert reason_of(batch, first) == JOB_RESOURCE_MESSAGE
    assert describe(batch, second).get("statusReason") is None and describe(batch, second)["status"] == "RUNNABLE"
    for job_id in (first, second):
        batch.cancel_job(jobId=job_id, reason="done")


def test_the_time_limit_cancels_the_head_then_the_next_one(batch: Any, stalled_spot: None) -> None:
    queue = spot_queue(batch, "limited", limit(CAPACITY, 1))
    [described] = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert described["jobStateTimeLimitActions"] == [limit(CAPACITY, 1)]
    first, second = submit(batch, queue, gpus=8, count=2)
    cancelled = [final(batch, first), final(batch, second)]
    for job in cancelled:
        assert job["status"] == "FAILED" and job["attempts"] == []
        assert job["statusReason"] == "Canceled by JobStateTimeLimit action due to reason: " + CAPACITY
    # the second one's clock started only when it reached the head
    assert cancelled[1]["stoppedAt"] - cancelled[0]["stoppedAt"] >= 900


def test_a_service_role_without_the_permissions_shows_no_capacity_reason_and_cancels_nothing() -> None:
    with BatchEmulator(capacity_reasons=False) as emulator:
        batch = emulator.client("batch")
        emulator.stall("gpu-spot-ce")
        [stuck] = submit(batch, spot_queue(batch, "blind", limit(CAPACITY, 1)), gpus=8)
        # a witness submitted later, in a queue of its own, whose misconfiguration is still seen and acted on
        [witness] = submit(batch, spot_queue(batch, "witness", limit(JOB_RESOURCE, 2)), gpus=16)
        assert final(batch, witness)["statusReason"].endswith(JOB_RESOURCE)
        job = describe(batch, stuck)  # at the head for longer than its limit, with nothing to act on
        assert job["status"] == "RUNNABLE" and "statusReason" not in job


def test_a_stall_with_no_reason_shows_none(emulator: BatchEmulator, batch: Any) -> None:
    emulator.stall("gpu-spot-ce", reason=None)
    try:
        [stuck] = submit(batch, spot_queue(batch, "unexplained", limit(CAPACITY, 1)), gpus=8)
        [witness] = submit(batch, spot_queue(batch, "witness-2", limit(JOB_RESOURCE, 2)), gpus=16)
        assert final(batch, witness)["status"] == "FAILED"
        job = describe(batch, stuck)
        assert job["status"] == "RUNNABLE" and "statusReason" not in job
    finally:
        emulator.release("gpu-spot-ce")
    assert final(batch, stuck)["status"] == "SUCCEEDED"


def test_a_service_role_stall_is_shown_but_no_time_limit_acts_on_it(emulator: BatchEmulator, batch: Any) -> None:
    """The guide: "You can't configure a programmable action through the jobStateTimeLimitActions parameter"."""
    emulator.stall("gpu-spot-ce", reason="MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS")
    try:
        queue = spot_queue(batch, "role", limit("MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS", 1))
        [stuck] = submit(batch, queue, gpus=8)
        assert reason_of(batch, stuck) == (
            "MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS \u2013 Batch service role has a permission issue."
        )
        [witness] = submit(batch, spot_queue(batch, "witness-3", limit(JOB_RESOURCE, 2)), gpus=16)
        assert final(batch, witness)["status"] == "FAILED"
        assert describe(batch, stuck)["status"] == "RUNNABLE"
    finally:
        emulator.release("gpu-spot-ce")
    assert final(batch, stuck)["status"] == "SUCCEEDED"


def test_queue_specs_carry_time_limits_and_max_vcpus_blocks_with_its_own_reason() -> None:
    max_resource = "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE"
    setup = BatchSetup(
        compute_environments=(ComputeEnvironmentSpec("small-ce", "EC2", max_vcpus=2),),
        queues=(QueueSpec("small", ("small-ce",), job_state_time_limit_actions=(limit(max_resource, 1),)),),
    )
    with BatchEmulator(setup) as emulator:
        batch = emulator.client("batch")
        [queue] = batch.describe_job_queues(jobQueues=["small"])["jobQueues"]
        assert queue["jobStateTimeLimitActions"] == [limit(max_resource, 1)]
        [job_id] = submit(batch, "small", gpus=1)  # 4 vCPUs, more than the environment's maxvCpus
        assert reason_of(batch, job_id) == (
            max_resource + " - CE(s) associated with the job queue cannot meet the CPU requirement of the job."
        )
        job = final(batch, job_id)
        assert job["statusReason"] == "Canceled by JobStateTimeLimit action due to reason: " + max_resource
        assert job["attempts"] == []


def test_update_job_queue_sets_time_limits(batch: Any) -> None:
    queue = spot_queue(batch, "updated")
    batch.update_job_queue(jobQueue=queue, jobStateTimeLimitActions=[limit(JOB_RESOURCE, 1)])
    [described] = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert described["jobStateTimeLimitActions"] == [limit(JOB_RESOURCE, 1)]
    [job_id] = submit(batch, queue, gpus=16)
    assert final(batch, job_id)["statusReason"].endswith(JOB_RESOURCE)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"action": "TERMINATE"}, "only CANCEL"), ({"maxTimeSeconds": 0}, "maxTimeSeconds"), ({"state": "X"}, "RUNNABLE")],
)
def test_invalid_time_limits_are_refused(batch: Any, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ClientError, match=message) as error:
        spot_queue(batch, f"invalid-{next(iter(change))}", {**limit(CAPACITY, 600), **change})
    assert error.value.response["Error"]["Code"] == "ClientException"

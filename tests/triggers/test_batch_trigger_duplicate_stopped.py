"""A Batch trigger whose job another follower of the same task try terminated as a duplicate.

Two triggerers running one trigger (apache/airflow#37180) each list the try's jobs of a name and keep
the oldest (``batch_submit.stop_duplicates``). ListJobs is eventually consistent: one follower can
see the try's first job while its twin does not yet, and the first terminates the job the twin
follows. The twin must not take that job's end (FAILED, with the duplicate's reason) for the task's
outcome: it follows the job that was kept. Against the AWS Batch emulator, the operator deferring
as on a worker (``tests.operators.test_batch_operator_deferred``).
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_gpu.hooks import batch_submit
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers import batch_resubmission
from airflow_gpu.triggers.batch_resubmission import BatchResubmission
from tests.operators.test_batch_operator_deferred import defer, first_event, trigger_of
from tests.operators.test_batch_operator_runs import Store, Ti

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("reason", [batch_resubmission.DUPLICATE_REASON, batch_submit.DUPLICATE_REASON])
def test_a_follower_whose_job_was_stopped_as_a_duplicate_follows_the_kept_one(
    aws_default_connection: BatchEmulator, reason: str
) -> None:
    """The worker's job (the try's first, kept) runs; a twin follows a second job of the same name and try,
    which the other follower terminates as the duplicate. The twin's event is the kept job's success, not
    the duplicate's FAILED."""
    emulator, context = aws_default_connection, {"ti": Ti(), "task_state_store": Store()}
    deferred = defer(context)  # the kept job: prints the result after a few seconds
    plan = deferred.trigger.serialize()[1]["gpu_spot"]
    kept = deferred.trigger.serialize()[1]["job_id"]
    batch = emulator.client("batch")
    first = batch.describe_jobs(jobs=[kept])["jobs"][0]
    resubmission = BatchResubmission.from_argument(plan)
    arguments = {**resubmission.arguments(resubmission.base_key), "jobName": first["jobName"]}
    duplicate = batch.submit_job(**arguments)["jobId"]  # the twin's resend, created later
    twin = trigger_of(deferred)
    twin.job_id = duplicate
    batch.terminate_job(jobId=duplicate, reason=reason)  # by the follower that saw both
    wait_for(lambda: emulator._job(duplicate).status == "FAILED", 60, "the duplicate to stop")

    event = asyncio.run(first_event(twin))

    assert (event["status"], event["job_id"], event["job_status"]) == ("done", kept, "SUCCEEDED")
    assert event["gpu_state"]["workload"] == kept

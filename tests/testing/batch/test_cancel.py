"""CancelJob and TerminateJob as the AWS Batch API reference states them.

CancelJob: "Jobs that are in a SUBMITTED, PENDING, or RUNNABLE state are cancelled and the job status
is updated to FAILED ... Jobs that progressed to the STARTING or RUNNING state aren't canceled. However,
the API operation still succeeds". TerminateJob stops a job in any state that is not final.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.testing.batch.api import describe, final, register, status_is


def test_cancel_leaves_a_running_job_running(batch: Any, tmp_path: Path) -> None:
    release = tmp_path / "release"
    definition = register(batch, "runs-on", ["sh", "-c", f"until [ -e {release} ]; do sleep 0.05; done"])
    job_id = batch.submit_job(jobName="runs-on", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    status_is(batch, job_id, "RUNNING")
    answer = batch.cancel_job(jobId=job_id, reason="cancelled too late")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200  # the call succeeds, and does nothing
    running = describe(batch, job_id)
    assert running["status"] == "RUNNING" and "statusReason" not in running
    release.touch()
    job = final(batch, job_id)
    assert job["status"] == "SUCCEEDED" and job["statusReason"] == "Essential container in task exited"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [0]


@pytest.mark.parametrize("call", ["cancel_job", "terminate_job"])
def test_cancel_or_terminate_fails_a_runnable_job_without_attempts(batch: Any, stalled_spot: None, call: str) -> None:
    """Both act on a job that has not started: FAILED with the reason, no attempt, no ``startedAt``."""
    definition = register(batch, "waits", ["true"], gpus=8)
    job_id = batch.submit_job(jobName="waits", jobQueue="gpu-spot", jobDefinition=definition)["jobId"]
    status_is(batch, job_id, "RUNNABLE")
    getattr(batch, call)(jobId=job_id, reason=f"{call} while waiting")
    job = final(batch, job_id)
    assert job["status"] == "FAILED" and job["statusReason"] == f"{call} while waiting"
    assert job["attempts"] == [] and "startedAt" not in job


def test_cancelling_an_array_parent_cancels_its_children(batch: Any, stalled_spot: None) -> None:
    """The API reference: "When you try to cancel an array parent job in PENDING, Batch attempts to cancel
    all child jobs. The array parent job is canceled when all child jobs are completed."
    """
    definition = register(batch, "shards", ["true"], gpus=8)
    parent = batch.submit_job(
        jobName="shards", jobQueue="gpu-spot", jobDefinition=definition, arrayProperties={"size": 2}
    )["jobId"]
    status_is(batch, f"{parent}:1", "RUNNABLE")
    batch.cancel_job(jobId=parent, reason="drop the shards")
    children = [final(batch, f"{parent}:{i}") for i in range(2)]
    assert [(c["status"], c["statusReason"], c["attempts"]) for c in children] == [
        ("FAILED", "drop the shards", []),
        ("FAILED", "drop the shards", []),
    ]
    job = final(batch, parent)
    assert job["status"] == "FAILED" and job["statusReason"] == "drop the shards"


@pytest.mark.parametrize(("status", "cancelled"), [("SUBMITTED", True), ("PENDING", True), ("RUNNABLE", True),
                                                   ("STARTING", False), ("RUNNING", False)])  # fmt: skip
def test_starting_counts_as_started(emulator: BatchEmulator, batch: Any, status: str, cancelled: bool) -> None:
    """The rule itself, on a job no driver moves (the race a real client can lose takes a tick to show)."""
    from airflow_gpu.testing.batch.jobs import EmulatedJob

    register(batch, "rule", ["true"])
    backend = emulator.driver.backend
    job = EmulatedJob(
        "rule", backend.get_job_definition("rule"), backend.get_job_queue("gpu-spot"), backend,
        log_backend=None, container_overrides=None, eks_properties_override=None, depends_on=None,
        parameters=None, all_jobs={}, timeout=None, array_properties={},
    )  # fmt: skip
    job.job_queue.jobs.remove(job)  # moto lists a queue's jobs from there: keep this one out of ListJobs
    job.status = status
    job.cancel("cancel it")
    assert (job.termination == "cancel it") is cancelled
    job.terminate("terminate it")  # TerminateJob acts on any job not yet final
    assert job.termination == ("cancel it" if cancelled else "terminate it")

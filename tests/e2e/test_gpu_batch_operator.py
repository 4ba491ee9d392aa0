"""``GPUBatchOperator`` end to end: a real ``airflow dags test`` against the AWS Batch emulator, with
spot reclaims and no-capacity stalls injected while the task runs."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.accelerators.batch import instance_offers
from airflow_gpu.testing.batch.emulator import BatchEmulator

pytestmark = pytest.mark.slow

Airflow = Callable[..., subprocess.CompletedProcess[str]]


def run_scenario(
    airflow: Airflow, emulator: BatchEmulator, tmp_path: Path, scenario: str, deferrable: bool = False
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result_file = tmp_path / "result.json"
    completed = airflow(
        "dags", "test", "gpu_batch",
        AIRFLOW_CONN_AWS_DEFAULT=emulator.airflow_connection_uri(), GPU_SCENARIO=scenario,
        RESULT_FILE=str(result_file), CHECKPOINT_FILE=str(tmp_path / "checkpoint.json"),
        GPU_DEFERRABLE="1" if deferrable else "0",
    )  # fmt: skip
    report = json.loads(result_file.read_text()) if result_file.exists() else {}
    return completed, report


def describe(emulator: BatchEmulator) -> list[dict[str, Any]]:
    ids = [job.job_id for job in emulator.jobs()]
    jobs = emulator.client("batch").describe_jobs(jobs=ids)["jobs"] if ids else []
    return sorted(jobs, key=lambda j: j["createdAt"])


class Reclaimer(threading.Thread):
    """Reclaims the spot host of running attempts, ``times`` times, once each has made progress."""

    def __init__(self, emulator: BatchEmulator, times: int) -> None:
        super().__init__(daemon=True)
        self.emulator, self.times, self.done = emulator, times, threading.Event()
        self.reclaimed: list[tuple[str, int]] = []

    def run(self) -> None:
        while len(self.reclaimed) < self.times and not self.done.is_set():
            for job in list(self.emulator.jobs()):
                key = (job.job_id, len(job.attempts))
                if job.status == "RUNNING" and job.job_queue.name == "gpu-spot" and key not in self.reclaimed:
                    time.sleep(0.8)
                    if job.status == "RUNNING":
                        self.emulator.reclaim(job.job_id)
                        self.reclaimed.append(key)
            time.sleep(0.05)


def test_single_job(airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path) -> None:
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "single")
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "resuming at step 0 batch attempt 1 on gpu-spot A10G" in completed.stdout  # CloudWatch -> task log
    assert report["result"] == {"total": 465} and report["interruptions"] == []
    assert report["accelerator"] == {"accelerator": "A10G", "capacity": "spot", "queue": "gpu-spot"}
    [job] = describe(batch_emulator)
    assert job["jobId"] == report["job_id"] and job["status"] == "SUCCEEDED"
    definition = batch_emulator.client("batch").describe_job_definitions(jobDefinitions=[job["jobDefinition"]])
    [registered] = definition["jobDefinitions"]
    assert registered["jobDefinitionName"] == "gpu_batch--train--A10G"
    assert {"type": "GPU", "value": "1"} in registered["containerProperties"]["resourceRequirements"]
    assert registered["retryStrategy"]["attempts"] == 4
    assert job["tags"]["airflow-gpu/task"] == "train" and job["tags"]["airflow-gpu/try"] == "1"
    # Parsed and run again: the same definition revision, not a new one.
    completed, _ = run_scenario(airflow, batch_emulator, tmp_path, "single")
    assert completed.returncode == 0
    assert {j["jobDefinition"] for j in describe(batch_emulator)} == {job["jobDefinition"]}


def test_spot_reclaim_is_retried_by_batch_and_resumes(
    airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path
) -> None:
    reclaimer = Reclaimer(batch_emulator, times=2)
    reclaimer.start()
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "reclaim")
    reclaimer.done.set()
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert report["result"] == {"total": 465}  # the same answer as without reclaims
    assert completed.stdout.count("SIGTERM at step") == 2
    [job] = describe(batch_emulator)  # Batch retried inside one job: no second submission
    assert [a["container"].get("exitCode") for a in job["attempts"]] == [143, 143, 0]
    assert [(i["job"], i["attempt"], i["reason"]) for i in report["interruptions"]] == [
        (job["jobId"], 1, "SpotReclaim"),
        (job["jobId"], 2, "SpotReclaim"),
    ]


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_past_the_budget_it_moves_to_the_on_demand_queue(
    airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path, deferrable: bool
) -> None:
    reclaimer = Reclaimer(batch_emulator, times=2)
    reclaimer.start()
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "fallback", deferrable)
    reclaimer.done.set()
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert report["result"] == {"total": 465}
    spot, on_demand = describe(batch_emulator)
    assert spot["status"] == "FAILED" and spot["statusReason"].startswith("Host EC2")
    assert len(spot["attempts"]) == 2  # max_interruptions=1: Batch made two attempts
    assert on_demand["status"] == "SUCCEEDED" and on_demand["jobQueue"].endswith("/gpu-on-demand")
    assert spot["jobName"] == on_demand["jobName"] == "train"  # a resubmission keeps the task's job name
    assert len(report["interruptions"]) == 2
    assert report["accelerator"] == {"accelerator": "H100:8", "capacity": "on-demand", "queue": "gpu-on-demand"}
    assert "falling back to on-demand capacity" in completed.stdout


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_no_capacity_past_the_timeout_cancels_and_goes_on_demand(
    airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path, deferrable: bool
) -> None:
    batch_emulator.stall("gpu-spot-ce")
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "capacity", deferrable)
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "ran on gpu-on-demand" in completed.stdout
    stuck, ran = describe(batch_emulator)
    assert stuck["status"] == "FAILED" and stuck["attempts"] == []  # cancelled while RUNNABLE: never starts later
    assert "no capacity" in stuck["statusReason"]
    assert ran["status"] == "SUCCEEDED"
    assert report["accelerator"]["capacity"] == "on-demand"


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_application_failure_fails_without_retries(
    airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path, deferrable: bool
) -> None:
    """Deferrable too: FAILED is final at once, not polled until the waiter gives up (apache/airflow#34017)."""
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "app-failure", deferrable)
    assert "new_state=failed" in completed.stdout  # the run itself ends with the all_done report task
    assert "up_for_retry" not in completed.stdout and "retry_on_app_failure=False" in completed.stdout
    [job] = describe(batch_emulator)
    assert len(job["attempts"]) == 1 and job["container"]["exitCode"] == 7
    assert report["interruptions"] == []


def test_a_gpu_no_queue_offers_fails_at_once(airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path) -> None:
    completed, _ = run_scenario(airflow, batch_emulator, tmp_path, "no-queue")
    assert "new_state=failed" in completed.stdout and "up_for_retry" not in completed.stdout
    assert "no queue can launch B200:8: queue gpu-on-demand (on-demand) offers g5 (A10G)" in completed.stdout
    assert describe(batch_emulator) == []  # nothing submitted to sit in RUNNABLE


def test_mapped_over_five_shards(airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path) -> None:
    completed, report = run_scenario(airflow, batch_emulator, tmp_path, "mapped")
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert sorted(r["shard"] for r in report["result"]) == [0, 1, 2, 3, 4]
    assert sorted(j["jobName"] for j in describe(batch_emulator)) == [f"train-m{i}" for i in range(5)]


def test_your_own_job_definition_keeps_its_retry_strategy(
    airflow: Airflow, batch_emulator: BatchEmulator, tmp_path: Path
) -> None:
    """The spec travels as overrides; the definition's retryStrategy is not overwritten (apache/airflow#39607)."""
    batch = batch_emulator.client("batch")
    own = batch.register_job_definition(
        jobDefinitionName="team-trainer",
        type="container",
        containerProperties={
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["sh", "-c", "echo own definition attempt $AWS_BATCH_JOB_ATTEMPT; exit 1"],
            "resourceRequirements": [{"type": "VCPU", "value": "2"}, {"type": "MEMORY", "value": "4096"}],
        },
        retryStrategy={"attempts": 2},
    )["jobDefinitionArn"]
    completed, _ = run_scenario(airflow, batch_emulator, tmp_path, "own-definition")
    assert "new_state=failed" in completed.stdout
    [job] = describe(batch_emulator)
    assert job["jobDefinition"] == own
    assert len(job["attempts"]) == 2  # the definition's own retryStrategy ran
    [emulated] = batch_emulator.jobs()
    assert emulated.resources()["GPU"] == 2  # the spec's GPUs reached Batch as an override
    [host] = instance_offers([emulated.instance_type])
    assert host.instance_type.accelerators >= 2  # Batch picks the type among the queue's; the count holds
    assert "own definition attempt 2" in completed.stdout

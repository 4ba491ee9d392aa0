"""No orphans, no duplicates on AWS Batch, on the shared real Airflow stack against the Batch emulator:
"Mark Failed" terminates the running job, and a retry after a worker crash follows the job its
earlier try started instead of submitting a second one (apache/airflow#72413)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from tests.e2e.test_gpu_lifecycle import kill_worker, mark_failed, task_log, wait_run

pytestmark = pytest.mark.slow

Stack = tuple[AirflowStack, KubernetesEmulator]


def jobs_of(batch: BatchEmulator, dag_id: str) -> list[Any]:
    return [
        j for j in batch.jobs() if batch.driver.backend.list_tags_for_resource(j.arn).get("airflow-gpu/dag") == dag_id
    ]


def running_job(batch: BatchEmulator, dag_id: str) -> Any:
    return wait_for(
        lambda: next((j for j in jobs_of(batch, dag_id) if j.status == "RUNNING"), None), 180, f"{dag_id}'s job to run"
    )


def test_mark_failed_terminates_the_job(
    airflow_stack: Stack, stack_batch_emulator: BatchEmulator, tmp_path: Path
) -> None:
    stack, _ = airflow_stack
    stack.wait_for_dag("gpu_batch_on_kill")
    run_id = stack.trigger("gpu_batch_on_kill", {"release": str(tmp_path / "release")})
    job = running_job(stack_batch_emulator, "gpu_batch_on_kill")
    wait_for(lambda: (tmp_path / "release").parent.exists() and job.attempts, 30, "the attempt")
    mark_failed(stack, "gpu_batch_on_kill", run_id, "train")
    wait_for(lambda: job.status == "FAILED", 120, "the job to be terminated", interval=0.3)
    assert job.job_stopped_reason == "Task killed by the user"
    assert (tmp_path / "release.sigterm").exists()  # SIGTERM reached the workload
    assert wait_run(stack, "gpu_batch_on_kill", run_id) == "failed"


def test_worker_crash_retry_follows_the_running_job(
    airflow_stack: Stack, stack_batch_emulator: BatchEmulator, tmp_path: Path
) -> None:
    stack, _ = airflow_stack
    dag_id = "gpu_batch_reattach"
    stack.wait_for_dag(dag_id)
    release = tmp_path / "release"
    run_id = stack.trigger(dag_id, {"release": str(release)})
    job = running_job(stack_batch_emulator, dag_id)
    [ti] = stack.task_instances(dag_id, run_id)
    kill_worker(stack, ti["id"])

    def second_try_running() -> bool:
        [current] = stack.task_instances(dag_id, run_id)
        return bool(current["try_number"] == 2 and current["state"] == "running")

    wait_for(second_try_running, 240, "the second try", interval=0.5)
    wait_for(lambda: "Reattached to AWS Batch job" in task_log(stack, dag_id, run_id, 2), 120, "the reattach")
    release.touch()
    assert wait_run(stack, dag_id, run_id) == "success"
    assert [j.job_id for j in jobs_of(stack_batch_emulator, dag_id)] == [job.job_id]  # one job, ever
    assert stack.xcom(dag_id, run_id, "train") == {"batch_attempt": 1, "gpu_attempt": 1}
    assert stack.xcom(dag_id, run_id, "train", "batch_job_id") == job.job_id

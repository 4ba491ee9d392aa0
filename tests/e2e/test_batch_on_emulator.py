"""The official ``BatchOperator``, unmodified, against the Batch emulator on the shared Airflow stack
(tests/e2e/stack_dags/official_operators.py), with its connection pointed at it by the
``endpoint_url`` extra exactly as at a real account: to completion with the job's CloudWatch lines
in the task log, failing with the container's exit code, and deferrable, its ``BatchJobTrigger``
polling the emulator from the real triggerer."""

from __future__ import annotations

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.e2e.scenarios import Injector, ReleaseAfterDeferral, Scenario, ScenarioRun, scenarios

pytestmark = pytest.mark.slow


def register_gpu_smoke(emulator: BatchEmulator) -> None:
    emulator.client("batch").register_job_definition(
        jobDefinitionName="gpu-smoke",
        type="container",
        containerProperties={
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["true"],
            "resourceRequirements": [
                {"type": "GPU", "value": "1"},
                {"type": "VCPU", "value": "4"},
                {"type": "MEMORY", "value": "15000"},
            ],
        },
    )


def smoke(dag_id: str, injector: type[Injector] | None = None) -> Scenario:
    return Scenario(dag_id, "batch", prepare=register_gpu_smoke, injector=injector)


def jobs(emulator: BatchEmulator) -> list[dict[str, object]]:
    batch = emulator.client("batch")
    ids = [job.job_id for job in emulator.jobs()]
    return list(batch.describe_jobs(jobs=ids)["jobs"]) if ids else []


@scenarios(smoke("batch_on_emulator"))
def test_batch_operator_runs_a_gpu_job(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    log = scenario_run.log("smoke")
    assert "line-one on gpu-spot-ce" in log and "line-two" in log
    [job] = jobs(scenario_run.emulator)
    assert job["status"] == "SUCCEEDED" and job["jobName"] == "smoke"


@scenarios(smoke("batch_on_emulator_exit3"))
def test_batch_operator_fails_with_the_exit_code(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "failed"
    [job] = jobs(scenario_run.emulator)
    assert job["status"] == "FAILED" and job["container"]["exitCode"] == 3  # type: ignore[index]
    assert "Essential container in task exited" in scenario_run.log("smoke")


@scenarios(smoke("batch_on_emulator_deferrable", ReleaseAfterDeferral))
def test_deferrable_batch_operator(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    log = scenario_run.log("smoke")  # the worker's log and the triggerer's
    assert "Pausing task as DEFERRED" in log
    [job] = jobs(scenario_run.emulator)
    assert job["status"] == "SUCCEEDED"

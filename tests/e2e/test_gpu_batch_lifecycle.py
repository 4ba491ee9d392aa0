"""No orphans, no duplicates on AWS Batch, on the shared real Airflow stack against the Batch emulator:
"Mark Failed" terminates the running job, and a retry after a worker crash follows the job its
earlier try started instead of submitting a second one (apache/airflow#72413).

Scenarios (``tests/e2e/scenarios.py``), each with a Batch emulator of its own, whose injector does
what the person or the crash does once the job runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, scenarios
from tests.e2e.test_gpu_lifecycle import kill_worker, mark_failed

pytestmark = pytest.mark.slow


class JobInjector(Injector):
    def running_job(self) -> Any:
        return self.until(
            lambda: next((j for j in self.emulator.jobs() if j.status == "RUNNING" and j.attempts), None),
            300,  # from the launch: on two busy cores a task may wait minutes for its worker
            "the job to run",
        )


class MarkFailedWhenRunning(JobInjector):
    """Marks the task failed once its workload runs (its SIGTERM trap set), then waits for the
    job's termination, which the task's ``on_kill`` sends after the run has failed."""

    outlives_the_run = True

    def inject(self) -> None:
        run = self.scenario_run
        self.job = self.running_job()
        self.until(lambda: (run.workdir / "release.ready").exists(), 120, "the workload's trap")
        mark_failed(run.stack, run.dag_id, run.run_id, "train")
        self.until(lambda: self.job.status == "FAILED", 120, "the job to be terminated")


@scenarios(Scenario("gpu_batch_on_kill", "batch", injector=MarkFailedWhenRunning))
def test_mark_failed_terminates_the_job(scenario_run: ScenarioRun) -> None:
    run = scenario_run
    assert isinstance(run.injector, MarkFailedWhenRunning)
    assert run.state() == "failed"
    assert run.injector.job.job_stopped_reason == "Task killed by the user"
    assert (run.workdir / "release.sigterm").exists()  # SIGTERM reached the workload
    assert [j.job_id for j in run.emulator.jobs()] == [run.injector.job.job_id]  # not submitted again


class WorkerKiller(JobInjector):
    """Kills the worker once the job runs, waits for the retry to follow it, then releases it."""

    def inject(self) -> None:
        run = self.scenario_run
        self.job = self.running_job()
        [ti] = run.task_instances()
        kill_worker(run.stack, ti["id"])

        # The second try's log file, not the task-instance list polled for minutes (a loaded 2-core
        # run took 4.5 min: the dead worker's heartbeat timeout and the retry delay pass first).
        self.until(lambda: run.started(2), 600, "the second try", interval=0.5)
        self.until(lambda: "Reattached to AWS Batch job" in run.log(try_number=2), 120, "the reattach")
        (run.workdir / "release").touch()


@scenarios(Scenario("gpu_batch_reattach", "batch", injector=WorkerKiller))
def test_worker_crash_retry_follows_the_running_job(scenario_run: ScenarioRun) -> None:
    run = scenario_run
    assert isinstance(run.injector, WorkerKiller)
    job = run.injector.job
    assert run.state() == "success"
    assert [j.job_id for j in run.emulator.jobs()] == [job.job_id]  # one job, ever
    assert run.xcom() == {"batch_attempt": 1, "gpu_attempt": 1}
    assert run.xcom("batch_job_id") == job.job_id

"""``GPUBatchOperator`` end to end: each scenario of tests/e2e/stack_dags/gpu_batch_scenarios.py runs
on the shared Airflow stack (a real worker per try, the real triggerer for deferrable tasks)
against an AWS Batch emulator of its own, with spot reclaims and no-capacity stalls injected."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from airflow_gpu.accelerators.batch import instance_offers
from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.plugins.urls import absolute_task_url
from airflow_gpu.testing.batch.compute import LOG_GROUP
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, scenarios

pytestmark = pytest.mark.slow


def describe(emulator: BatchEmulator) -> list[dict[str, Any]]:
    ids = [job.job_id for job in emulator.jobs()]
    jobs = emulator.client("batch").describe_jobs(jobs=ids)["jobs"] if ids else []
    return sorted(jobs, key=lambda j: j["createdAt"])


class Reclaimer(Injector):
    """Reclaims the spot host of ``times`` attempts, each once it holds after 3 steps (the run's conf
    says "hold"), then releases the attempts that follow. With ``in_task_log`` it waits until the
    holding line has reached the task log too (the operator follows the attempt's log stream), so
    that the attempt's SIGTERM line can reach it as well; a deferred task's log has no lines to wait
    for, so without it the attempt's own CloudWatch stream says when."""

    def __init__(self, times: int, in_task_log: bool = False) -> None:
        super().__init__()
        self.times, self.in_task_log, self.reclaimed = times, in_task_log, []

    def holding(self, job: Any, logs: Any) -> bool:
        line = f"attempt {len(job.attempts)} holding at step"
        if self.in_task_log:
            return line in self.scenario_run.log()
        events = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=job.log_stream_name, startFromHead=True)[
            "events"
        ]
        return any(e["message"].startswith(line) for e in events)

    def inject(self) -> None:
        logs = self.emulator.client("logs")  # one client: this polls ten times a second
        while len(self.reclaimed) < self.times and not self.stop.is_set():
            for job in list(self.emulator.jobs()):
                key = (job.job_id, len(job.attempts))
                ours = job.status == "RUNNING" and job.job_queue.name == "gpu-spot" and key not in self.reclaimed
                if ours and self.holding(job, logs):
                    self.emulator.reclaim(job.job_id)
                    self.reclaimed.append(key)
            self.stop.wait(0.1)
        (self.scenario_run.workdir / "release").touch()


def batch(
    dag_id: str,
    prepare: Callable[[BatchEmulator], None] | None = None,
    injector: Callable[[], Injector] | None = None,
    runs: int = 1,
    conf: Mapping[str, Any] | None = None,
) -> Scenario:
    return Scenario(dag_id, "batch", prepare=prepare, injector=injector, runs=runs, conf=conf or {})


def both_modes(
    dag_id: str,
    prepare: Callable[[BatchEmulator], None] | None = None,
    injector: Callable[[], Injector] | None = None,
    conf: Mapping[str, Any] | None = None,
) -> pytest.MarkDecorator:
    return scenarios(
        batch(dag_id, prepare, injector, conf=conf),
        batch(f"{dag_id}_deferrable", prepare, injector, conf=conf),
        ids=["sync", "deferrable"],
    )


def assert_one_try(run: ScenarioRun, state: str, run_id: str | None = None) -> None:
    """The task ended ``state`` in its first try: no retry was ever scheduled, whatever ``retries`` says."""
    assert [(t["try_number"], t["state"]) for t in run.tries(run_id=run_id)] == [(1, state)]


@scenarios(batch("gpu_batch_single", runs=2))
def test_single_job(scenario_run: ScenarioRun) -> None:
    """Run twice, one run after the other (``max_active_runs=1``): the second parse registers nothing new."""
    first, second = scenario_run.run_ids
    assert [scenario_run.state(first), scenario_run.state(second)] == ["success", "success"]
    assert_one_try(scenario_run, "success", first)
    log = scenario_run.log(run_id=first)
    assert "resuming at step 0 batch attempt 1 on gpu-spot A10G" in log  # CloudWatch -> task log
    assert scenario_run.xcom() == {"total": 465} and scenario_run.xcom("gpu_interruptions") == []
    assert scenario_run.xcom("gpu_accelerator") == {"accelerator": "A10G", "capacity": "spot", "location": "gpu-spot"}
    emulator = scenario_run.emulator
    jobs = describe(emulator)
    assert [j["status"] for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    job = jobs[0]
    assert job["jobId"] == scenario_run.xcom("batch_job_id")
    definition = emulator.client("batch").describe_job_definitions(jobDefinitions=[job["jobDefinition"]])
    [registered] = definition["jobDefinitions"]
    assert registered["jobDefinitionName"] == "gpu_batch_single--train--A10G"
    assert {"type": "GPU", "value": "1"} in registered["containerProperties"]["resourceRequirements"]
    assert registered["retryStrategy"]["attempts"] == 4
    assert job["tags"]["airflow-gpu/task"] == "train" and job["tags"]["airflow-gpu/try"] == "1"
    # Parsed and run again: the same definition revision, not a new one.
    assert {j["jobDefinition"] for j in jobs} == {job["jobDefinition"]}
    all_revisions = emulator.client("batch").describe_job_definitions(jobDefinitionName=registered["jobDefinitionName"])
    assert len(all_revisions["jobDefinitions"]) == 1
    # The job's GPU profile, read from its CloudWatch stream with the result line.
    profile = scenario_run.xcom("gpu_profile", run_id=first)
    assert profile["source"] == "nvidia-smi" and [g["name"] for g in profile["gpus"]] == ["NVIDIA A10G"]
    assert profile["workload"] == job["jobId"] and profile["capacity"] == "spot" and profile["backend"] == "batch"
    assert profile["summary"][0]["samples"] >= 1 and profile["duration_s"] > 0
    assert profile["cost"]["instance_type"].startswith("g5.") and profile["cost"]["capacity"] == "spot"
    link = scenario_run.xcom(f"_link_{GPUProfileLink.__name__}", run_id=first)
    assert link == absolute_task_url(scenario_run.stack.url, scenario_run.dag_id, first, "train", -1)


@scenarios(batch("gpu_batch_reclaim", injector=lambda: Reclaimer(times=2, in_task_log=True), conf={"hold": True}))
def test_spot_reclaim_is_retried_by_batch_and_resumes(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert scenario_run.xcom() == {"total": 465}  # the same answer as without reclaims
    assert scenario_run.log().count("SIGTERM at step") == 2
    [job] = describe(scenario_run.emulator)  # Batch retried inside one job: no second submission
    assert [a["container"].get("exitCode") for a in job["attempts"]] == [143, 143, 0]
    assert [(i["workload"], i["attempt"], i["reason"]) for i in scenario_run.xcom("gpu_interruptions")] == [
        (job["jobId"], 1, "SpotReclaim"),
        (job["jobId"], 2, "SpotReclaim"),
    ]


@both_modes("gpu_batch_fallback", injector=lambda: Reclaimer(times=2), conf={"hold": True})
def test_past_the_budget_it_moves_to_the_on_demand_queue(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert scenario_run.xcom() == {"total": 465}
    spot, on_demand = describe(scenario_run.emulator)
    assert spot["status"] == "FAILED" and spot["statusReason"].startswith("Host EC2")
    assert len(spot["attempts"]) == 2  # max_interruptions=1: Batch made two attempts
    assert on_demand["status"] == "SUCCEEDED" and on_demand["jobQueue"].endswith("/gpu-on-demand")
    assert (spot["jobName"], on_demand["jobName"]) == ("train", "train-r1")  # a resubmission is named by its number
    assert on_demand["tags"] == spot["tags"]  # the task try's identity
    assert len(scenario_run.xcom("gpu_interruptions")) == 2
    assert scenario_run.xcom("gpu_accelerator") == {
        "accelerator": "H100:8",
        "capacity": "on-demand",
        "location": "gpu-on-demand",
    }
    assert "falling back to on-demand capacity" in scenario_run.log()
    assert_carried_by_the_trigger(scenario_run, [spot["jobId"]])


def assert_carried_by_the_trigger(run: ScenarioRun, replaced: list[str]) -> None:
    """Deferrable: one deferral, one resume; the triggerer submitted each next job, no worker round trip."""
    if not run.dag_id.endswith("_deferrable"):
        return
    log = run.log()
    assert log.count("Pausing task as DEFERRED") == 1
    assert [line.split(" in place of ")[1].split()[0] for line in log.splitlines() if " in place of " in line] == (
        replaced
    )


def stall_spot(emulator: BatchEmulator) -> None:
    emulator.stall("gpu-spot-ce")


@both_modes("gpu_batch_capacity", prepare=stall_spot)
def test_no_capacity_past_the_timeout_cancels_and_goes_on_demand(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert "ran on gpu-on-demand" in scenario_run.log()
    stuck, ran = describe(scenario_run.emulator)
    assert stuck["status"] == "FAILED" and stuck["attempts"] == []  # cancelled while RUNNABLE: never starts later
    assert "no capacity" in stuck["statusReason"]
    assert ran["status"] == "SUCCEEDED"
    assert scenario_run.xcom("gpu_accelerator")["capacity"] == "on-demand"
    assert_carried_by_the_trigger(scenario_run, [stuck["jobId"]])


@both_modes("gpu_batch_app_failure")
def test_application_failure_fails_without_retries(scenario_run: ScenarioRun) -> None:
    """Deferrable too: FAILED is final at once, not polled until the waiter gives up (apache/airflow#34017)."""
    assert scenario_run.state() == "failed"
    assert_one_try(scenario_run, "failed")  # retries=2, but a bug is not a preemption
    assert "retry_on_app_failure=False" in scenario_run.log()
    [job] = describe(scenario_run.emulator)
    assert len(job["attempts"]) == 1 and job["container"]["exitCode"] == 7
    assert scenario_run.xcom("gpu_interruptions") == []


#: (operation, kind, times): two in a row of each, which the hook's retry configuration rides out
#: through a real Airflow task, and a SubmitJob whose job Batch created but whose answer was lost (the
#: provider's own look-up). Six of each kept these two runs on the suite's critical path for over two
#: minutes of real backoff; bursts past botocore's retries, into the provider's own rounds, are
#: tests/operators/test_batch_operator_transient.py's, in-process.
TRANSIENT_FAULTS = (
    ("DescribeJobQueues", "throttle", 2),
    ("RegisterJobDefinition", "server", 2),
    ("SubmitJob", "throttle", 2),
    ("SubmitJob", "lost", 1),
    ("DescribeJobs", "unavailable", 2),
    ("DescribeJobs", "reset", 1),
    ("GetLogEvents", "throttle", 2),
)


def transient_faults(emulator: BatchEmulator) -> None:
    for operation, kind, times in TRANSIENT_FAULTS:
        emulator.fail(operation, kind, times=times)


@both_modes("gpu_batch_transient", prepare=transient_faults)
def test_a_burst_of_throttles_5xx_and_dropped_connections_is_ridden_out(scenario_run: ScenarioRun) -> None:
    """Issue 25, behaviour 3 (AWS Batch): the task meets throttles, server errors and dropped connections
    on its calls, in the worker and (deferrable) in the triggerer, and succeeds in its first try with
    one job: the SubmitJob whose answer was lost is found by name and tags, not sent again."""
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")  # retries=2: a failed try would show as a second one
    assert scenario_run.xcom() == {"ok": True}
    emulator = scenario_run.emulator
    served = [(f["operation"], f["fault"], f["times"]) for f in emulator.faults if "rate" in f]
    assert served == list(TRANSIENT_FAULTS)
    assert all(armed.hits == armed.times for armed in emulator._throttle.armed())
    [job] = describe(emulator)
    assert job["status"] == "SUCCEEDED" and job["jobId"] == scenario_run.xcom("batch_job_id")


@scenarios(batch("gpu_batch_no_queue"))
def test_a_gpu_no_queue_offers_fails_at_once(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "failed"
    assert_one_try(scenario_run, "failed")
    assert "no queue can launch B200:8: queue gpu-on-demand (on-demand) offers g5 (A10G)" in scenario_run.log()
    assert describe(scenario_run.emulator) == []  # nothing submitted to sit in RUNNABLE


@scenarios(batch("gpu_batch_mapped"))
def test_mapped_over_five_shards(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert sorted(scenario_run.xcom(map_index=i)["shard"] for i in range(5)) == [0, 1, 2, 3, 4]
    assert sorted(j["jobName"] for j in describe(scenario_run.emulator)) == [f"train-m{i}" for i in range(5)]


def register_team_trainer(emulator: BatchEmulator) -> None:
    emulator.client("batch").register_job_definition(
        jobDefinitionName="team-trainer",
        type="container",
        containerProperties={
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["sh", "-c", "echo own definition attempt $AWS_BATCH_JOB_ATTEMPT; exit 1"],
            "resourceRequirements": [{"type": "VCPU", "value": "2"}, {"type": "MEMORY", "value": "4096"}],
        },
        retryStrategy={"attempts": 2},
    )


@scenarios(batch("gpu_batch_own_definition", prepare=register_team_trainer))
def test_your_own_job_definition_keeps_its_retry_strategy(scenario_run: ScenarioRun) -> None:
    """The spec travels as overrides; the definition's retryStrategy is not overwritten (apache/airflow#39607)."""
    emulator = scenario_run.emulator
    assert scenario_run.state() == "failed"
    [job] = describe(emulator)
    own = emulator.client("batch").describe_job_definitions(jobDefinitionName="team-trainer")["jobDefinitions"]
    assert [d["jobDefinitionArn"] for d in own] == [job["jobDefinition"]]  # used as is, no new revision
    assert len(job["attempts"]) == 2  # the definition's own retryStrategy ran
    [emulated] = emulator.jobs()
    assert emulated.resources()["GPU"] == 2  # the spec's GPUs reached Batch as an override
    [host] = instance_offers([emulated.instance_type])
    assert host.instance_type.accelerators >= 2  # Batch picks the type among the queue's; the count holds
    assert "own definition attempt 2" in scenario_run.log()

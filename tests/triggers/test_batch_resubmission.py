"""``BatchResubmission``: what the Batch trigger decides and submits when it carries a spot run on.

No emulator: the jobs are DescribeJobs answers written as the AWS Batch API reference shows them
(a reclaimed attempt's ``statusReason`` is ``Host EC2 (instance i-...) terminated.``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.spot.batch import CAPACITY_CANCEL_PREFIX, retry_strategy
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.run import ENV_ATTEMPT, ENV_CAPACITY, ENV_INTERRUPTIONS, SpotRun
from airflow_gpu.triggers.batch_resubmission import MAX_JOB_NAME, BatchResubmission

IDENTITY = {"airflow-gpu/dag": "d", "airflow-gpu/task": "t", "airflow-gpu/try": "1"}


def plan(policy: SpotPolicy | None = None, first_name: str = "train", candidates: int = 1) -> dict[str, Any]:
    policy = policy or SpotPolicy(max_interruptions=0)
    run = SpotRun.start(policy, [f"A10G:{i + 1}" for i in range(candidates)], "batch", "spot")
    run.submitted("job-1")
    submissions = {
        f"{candidate}/{capacity}": {
            "jobQueue": f"gpu-{capacity}",
            "jobDefinition": f"arn:def:{candidate}",
            "tags": dict(IDENTITY),
            "containerOverrides": {"environment": [
                {"name": "USER_VAR", "value": "kept"}, {"name": ENV_ATTEMPT, "value": "1"},
            ]},
        }
        for candidate in range(candidates)
        for capacity in ("spot", "on-demand")
    }  # fmt: skip
    return {
        "policy": policy.model_dump(),
        "candidates": list(run.candidates),
        "requested_capacity": "spot",
        "state": run.to_json(),
        "submissions": submissions,
        "first_name": first_name,
        "identity": IDENTITY,
    }


def reclaimed(job_id: str, attempts: int = 1, queue: str = "gpu-spot") -> dict[str, Any]:
    attempt = {"statusReason": "Host EC2 (instance i-0abc) terminated.", "container": {"exitCode": 143}}
    return {
        "jobId": job_id, "status": "FAILED", "statusReason": "Host EC2 (instance i-0abc) terminated.",
        "attempts": [attempt] * attempts, "jobQueue": f"arn:aws:batch:us-east-1:1:job-queue/{queue}",
    }  # fmt: skip


def test_a_reclaim_past_the_spot_budget_moves_the_next_job_to_on_demand_with_the_runs_environment() -> None:
    resubmission = BatchResubmission.from_argument(plan())
    decided = resubmission.decide(reclaimed("job-1"))
    assert decided is not None and decided[1].action == "resubmit"
    assert resubmission.run.capacity == "on-demand" and len(resubmission.run.interruptions) == 1
    args = resubmission.submission(resubmission.next_name())
    assert args["jobName"] == "train-r1" and args["jobQueue"] == "gpu-on-demand"
    environment = {e["name"]: e["value"] for e in args["containerOverrides"]["environment"]}
    assert environment["USER_VAR"] == "kept" and environment[ENV_ATTEMPT] == "2"
    assert environment[ENV_CAPACITY] == "on-demand" and environment[ENV_INTERRUPTIONS] == "1"
    assert [e["name"] for e in args["containerOverrides"]["environment"]].count(ENV_ATTEMPT) == 1


def test_a_replayed_trigger_decides_the_same_and_counts_each_attempt_once() -> None:
    """A trigger restarted on another triggerer starts from its first arguments: the same job gets the
    same decision, the same next name, and its attempts are counted once (Batch retried three)."""
    spot = plan(SpotPolicy(max_interruptions=3))
    job = reclaimed("job-1", attempts=4)  # Batch retried three reclaims itself, the fourth ended the job
    first, replay = BatchResubmission.from_argument(spot), BatchResubmission.from_argument(spot)
    assert first.decide(job) is not None and replay.decide(job) is not None

    def untimed(resubmission: BatchResubmission) -> list[dict[str, Any]]:
        return [{k: v for k, v in i.items() if k != "time"} for i in resubmission.run.interruptions]

    assert untimed(first) == untimed(replay)
    assert len(first.run.interruptions) == 4 and first.run.capacity == "on-demand"
    assert first.next_name() == replay.next_name() == "train-r1"


def test_an_interruption_is_stamped_with_when_its_attempt_stopped_however_late_it_is_replayed() -> None:
    """A restarted trigger replays the run from its first arguments minutes later: each record keeps
    the time Batch says the attempt stopped (``attempts[].stoppedAt``, epoch milliseconds), so the
    replay's records are the first run's, to the letter."""
    job = reclaimed("job-1", attempts=2)
    job["attempts"] = [{**a, "stoppedAt": 1_767_225_600_000 + 60_000 * i} for i, a in enumerate(job["attempts"])]
    spot = plan(SpotPolicy(max_interruptions=1))
    first, replay = BatchResubmission.from_argument(spot), BatchResubmission.from_argument(spot)
    assert first.decide(job) is not None and replay.decide(job) is not None
    assert [i["time"] for i in first.run.interruptions] == ["2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00"]
    assert first.run.interruptions == replay.run.interruptions


def test_a_job_without_a_stop_time_is_stamped_when_it_is_seen() -> None:
    from datetime import datetime, timedelta, timezone

    resubmission = BatchResubmission.from_argument(plan())
    assert resubmission.decide(reclaimed("job-1")) is not None  # no stoppedAt anywhere
    (record,) = resubmission.run.interruptions
    assert datetime.now(timezone.utc) - datetime.fromisoformat(record["time"]) < timedelta(minutes=1)


def test_what_the_worker_concludes_leaves_the_run_untouched() -> None:
    """A success, a bug, or an interruption after which the policy gives up: the worker records it."""
    resubmission = BatchResubmission.from_argument(plan(SpotPolicy(max_interruptions=0, fallback_to_on_demand=False)))
    before = resubmission.run.to_json()
    bug = {"jobId": "job-1", "status": "FAILED", "attempts": [{"container": {"exitCode": 1}}], "jobQueue": "q"}
    succeeded = {"jobId": "job-1", "status": "SUCCEEDED", "attempts": [{"container": {"exitCode": 0}}]}
    for job in (bug, succeeded, reclaimed("job-1")):
        assert resubmission.decide(job) is None
        assert resubmission.run.to_json() == before


def test_a_capacity_cancel_moves_to_the_next_placement() -> None:
    resubmission = BatchResubmission.from_argument(plan())
    cancelled = {
        "jobId": "job-1",
        "status": "FAILED",
        "statusReason": f"{CAPACITY_CANCEL_PREFIX}, RUNNABLE",
        "attempts": [],
    }
    decided = resubmission.decide(cancelled)
    assert decided is not None and decided[0].reason == "CapacityTimeout"
    assert resubmission.submission("train-r1")["jobQueue"] != "gpu-spot"


def test_only_this_task_trys_oldest_job_is_kept() -> None:
    resubmission = BatchResubmission.from_argument(plan())
    other_try = {"jobId": "a", "createdAt": 1, "tags": {**IDENTITY, "airflow-gpu/try": "2"}}
    first = {"jobId": "c", "createdAt": 5, "tags": dict(IDENTITY)}
    second = {"jobId": "b", "createdAt": 7, "tags": {**IDENTITY, "extra": "x"}}
    assert resubmission.keep([second, other_try, first]) == first
    assert resubmission.keep([other_try]) is None


def test_multi_node_jobs_get_the_environment_in_every_node_range() -> None:
    spot = plan()
    for args in spot["submissions"].values():
        overrides = args.pop("containerOverrides")
        args["nodeOverrides"] = {"nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]}
    resubmission = BatchResubmission.from_argument(spot)
    assert resubmission.decide(reclaimed("job-1")) is not None
    node = resubmission.submission("x")["nodeOverrides"]["nodePropertyOverrides"][0]["containerOverrides"]
    assert {"name": ENV_ATTEMPT, "value": "2"} in node["environment"]


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=200), st.integers(1, 99))
def test_next_names_are_valid_batch_names(first: str, submissions: int) -> None:
    """Batch job names: up to 128 letters, digits, hyphens and underscores."""
    resubmission = BatchResubmission.from_argument(plan(first_name=first))
    resubmission.run.submissions = submissions
    name = resubmission.next_name()
    assert len(name) <= MAX_JOB_NAME and name.endswith(f"-r{submissions}")


def test_the_spot_budget_is_batchs_own_retry_first() -> None:
    """The trigger only sees a job Batch gave up on: the budget's reclaims are Batch's retries."""
    assert retry_strategy(SpotPolicy(max_interruptions=0))["attempts"] == 1

"""The spot run of a deferred Batch job, carried on in the triggerer: classify, decide, submit the next job.

Before, a reclaimed deferred job (or one cancelled past ``capacity_timeout``) went back to a
worker, which submitted the next job and deferred again: a round trip through the scheduler per
interruption, each meeting apache/airflow#72716. Here the trigger holds the run's ``SpotRun`` and
the SubmitJob arguments of every placement the policy may move to (built by the operator at
deferral: ``operators.batch_deferral``); it records the interruption and submits the next job
itself. The task resumes on a worker only for the final job (result, logs, profile).

The arguments are stored in Airflow's ``trigger`` table with every deferral (a TEXT column of 64
KiB on MySQL), and the placements share most of them (the environment, the profiler's command):
they travel as the current placement's arguments and a ``manifest_delta`` per other placement. A
placement whose queue does not launch its accelerator is moved where the worker's own check
(``batch_queues.offered_placement``, from the queues the worker read) would move it: the worker
writes those moves into the plan, so the triggerer never describes a compute environment.

SubmitJob has no idempotency token, so a trigger that runs twice (two triggerers,
apache/airflow#37180) or again after a triggerer restart (it replays the run from its first
arguments) must not submit a second job. The next job's name is deterministic per task try and
submission (``<first job name>-r<N>``) and it carries the task try's identity tags; before
submitting, the trigger looks for a job of that name with those tags (ListJobs with a
``JOB_NAME`` filter, then DescribeJobs for the tags) and follows it if there is one. Two triggers
racing inside ListJobs' consistency window can still both submit: each then lists the name again
for a few rounds and keeps the oldest job of this task try, cancelling the others before they get
an instance (``converge``), so the two triggers follow the same job.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.spot.batch import FINAL, attempts_ended_at, classify_attempts, classify_job, queue_name
from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import Decision, Placement, SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.utils.manifest_delta import apply, delta

#: Batch job names: letters, digits, hyphens and underscores, at most 128 characters.
MAX_JOB_NAME = 128
#: CancelJob's reason for a duplicate a racing trigger submitted: it never gets an instance.
DUPLICATE_REASON = "airflow-gpu: a duplicate submission of this task try's job (another triggerer ran the trigger)"


def submission_name(first_name: str, submissions: int) -> str:
    """The job name of a task try's submission after ``submissions`` others: ``<first>-r<N>``. The
    worker names its resubmissions the same way, so one rule finds every job of the try."""
    if submissions == 0:
        return first_name
    suffix = f"-r{submissions}"
    return first_name[: MAX_JOB_NAME - len(suffix)] + suffix


def placement_key(placement: Placement) -> str:
    return f"{placement.candidate}/{placement.capacity or 'any'}"


def carried_arguments(spot: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The plan's SubmitJob arguments: a placement's key, its arguments, and the others' deltas from them.

    A plan written before the arguments travelled as deltas (a trigger already in the table when
    the provider was upgraded) holds every placement's arguments in full, under ``submissions``.
    """
    if "base" in spot:
        return str(spot["base_key"]), dict(spot["base"]), dict(spot["deltas"])
    submissions = dict(spot["submissions"])
    base_key = next(iter(submissions))
    base = submissions.pop(base_key)
    return base_key, base, {key: delta(base, arguments) for key, arguments in submissions.items()}


def carried_queues(spot: Mapping[str, Any]) -> list[str]:
    """Every queue the plan submits to."""
    _, base, deltas = carried_arguments(spot)
    return sorted({str(base["jobQueue"]), *(str(apply(base, change)["jobQueue"]) for change in deltas.values())})


@dataclass
class BatchResubmission:
    """What the trigger needs to go on with the spot run; built from the trigger's ``gpu_spot`` argument."""

    run: SpotRun
    #: One placement's SubmitJob arguments, without ``jobName``, and which placement that is.
    base: dict[str, Any]
    base_key: str
    #: Every other placement key -> the delta of its arguments from ``base``.
    deltas: dict[str, Any]
    first_name: str
    #: The task try's identity tags: a job with the next name is adopted only when it carries them.
    identity: dict[str, str]
    #: Placement key -> where the worker's queue check moves it (its queue does not launch its accelerator).
    moves: dict[str, Placement] = field(default_factory=dict)

    @classmethod
    def from_argument(cls, spot: Mapping[str, Any]) -> BatchResubmission:
        run = SpotRun.start(SpotPolicy(**spot["policy"]), spot["candidates"], "batch", spot.get("requested_capacity"))
        ignored = run.restore(spot["state"])
        if ignored:
            raise ValueError(f"the spot state carried to the trigger is not usable: {ignored}")
        base_key, base, deltas = carried_arguments(spot)
        moves = {
            key: Placement(int(candidate), capacity) for key, (candidate, capacity) in spot.get("moves", {}).items()
        }
        return cls(run, base, base_key, deltas, str(spot["first_name"]), dict(spot["identity"]), moves)

    # --- deciding -----------------------------------------------------------------------

    def decide(self, job: Mapping[str, Any]) -> tuple[Classification, Decision] | None:
        """For an ended job that the trigger may act on (a reclaim, missing capacity): how it ended and
        what the policy says. None (the run unchanged) for anything the worker concludes: a success,
        an application or configuration failure, or an interruption after which the policy gives up,
        which the worker records and fails with, as for any last job."""
        result = classify_job(job)
        if not (result.interrupted or result.outcome is Outcome.UNSCHEDULABLE):
            return None
        snapshot = self.run.to_json()
        decision = self.run.finish(
            result, classify_attempts(job), workload=str(job["jobId"]), location=queue_name(job),
            ended_at=attempts_ended_at(job),
        )  # fmt: skip
        if decision.action != "resubmit":
            self.run.restore(snapshot)
            return None
        return result, decision

    # --- the next job -------------------------------------------------------------------

    def next_name(self) -> str:
        return submission_name(self.first_name, self.run.submissions)

    def arguments(self, key: str) -> dict[str, Any]:
        """The SubmitJob arguments carried for the placement ``key``, without ``jobName``."""
        if key == self.base_key:
            return copy.deepcopy(self.base)
        if key not in self.deltas:
            raise KeyError(
                f"no submission was carried for placement {key}; carried: {sorted([self.base_key, *self.deltas])}"
            )
        return dict(apply(self.base, self.deltas[key]))

    def move_to_offered(self) -> Placement | None:
        """Move the run where the worker would submit it, if the queue of the placement the policy chose
        does not launch its accelerator; the placement it moved from, else None."""
        before = self.run.placement
        target = self.moves.get(placement_key(before))
        if target is None or target == before:
            return None
        self.run.move_to(target)
        return before

    def submission(self, name: str) -> dict[str, Any]:
        """SubmitJob's arguments for the run's current placement, named, with the run's environment
        (attempt, capacity, interruptions so far) in place of the first job's."""
        args = self.arguments(placement_key(self.run.placement))
        args["jobName"] = name
        environment = self.run.environment()
        for overrides in _container_overrides(args):
            given = [e for e in overrides.get("environment") or [] if e.get("name") not in environment]
            overrides["environment"] = [*given, *({"name": k, "value": v} for k, v in environment.items())]
        return args

    def same_task_try(self, job: Mapping[str, Any]) -> bool:
        return same_task_try(job, self.identity)

    def keep(self, jobs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        return oldest_of_try(jobs, self.identity)


def same_task_try(job: Mapping[str, Any], identity: Mapping[str, str]) -> bool:
    """Whether the job carries the task try's identity tags."""
    tags = job.get("tags") or {}
    return all(tags.get(key) == value for key, value in identity.items())


def oldest_of_try(jobs: Sequence[Mapping[str, Any]], identity: Mapping[str, str]) -> Mapping[str, Any] | None:
    """Of a task try's jobs of one name, the one every racing submitter keeps (a trigger, its twin, a
    worker): the oldest; None when none is the try's."""
    ours = [j for j in jobs if same_task_try(j, identity)]
    return min(ours, key=lambda j: (j.get("createdAt") or 0, j["jobId"])) if ours else None


def _container_overrides(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The container overrides of a SubmitJob: the job's own, or each node range's (multi-node)."""
    found = [args["containerOverrides"]] if isinstance(args.get("containerOverrides"), dict) else []
    for node_range in (args.get("nodeOverrides") or {}).get("nodePropertyOverrides") or []:
        if isinstance(node_range.get("containerOverrides"), dict):
            found.append(node_range["containerOverrides"])
    return found


def live_jobs(hook: Any, queues: Iterable[str], first_name: str, identity: Mapping[str, str]) -> list[dict[str, Any]]:
    """This task try's jobs named ``<first_name>-r<N>`` that have not ended, in ``queues`` (``hook``: a
    ``GPUBatchHook``): what a kill or a timed-out deferral must not leave running."""
    found: list[dict[str, Any]] = []
    for queue in sorted(set(queues)):
        for job in hook.jobs_named(queue, f"{first_name}-r*"):
            if job["status"] not in FINAL and same_task_try(job, identity):
                found.append(job)
    return found

"""What a deferred ``GPUBatchOperator`` hands its trigger so the triggerer can carry the spot run on.

The trigger (``triggers.batch_resubmission``) submits the next job itself after a reclaim or a
capacity timeout, so it needs the SubmitJob arguments of every placement the policy may move to:
each candidate accelerator on the requested capacity and on on-demand. They are built here, on
the worker, by the operator's own ``submission_arguments`` (the user's rendered arguments, the
job definition registered for the candidate, the queue, the overrides with the profiler), once
per placement.

A deferral that times out (``execution_timeout``) resumes on a worker that knows only the first
job; ``live_jobs`` finds the replacements the trigger submitted, by name and identity tags, so
that none runs on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_gpu.accelerators import batch_job
from airflow_gpu.triggers import batch_resubmission as resubmission
from airflow_gpu.triggers.batch_resubmission import placement_key

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.hooks.batch import GPUBatchHook
    from airflow_gpu.operators.batch import GPUBatchOperator


def first_job_name(operator: GPUBatchOperator, context: Context) -> str:
    """The name of this task try's first job; its replacements are ``<name>-r<N>``."""
    return batch_job.job_name(str(operator.job_name), getattr(context["ti"], "map_index", -1))


def resubmission_plan(operator: GPUBatchOperator, context: Context) -> dict[str, Any]:
    """The trigger's ``gpu_spot`` argument: the policy, the run's state and the jobs it may submit."""
    run = operator.spot_run
    saved = run.to_json()
    submissions: dict[str, dict[str, Any]] = {}
    try:
        for placement in run.reachable_placements():
            run.move_to(placement)
            arguments = operator.submission_arguments(context, placement)
            arguments.pop("jobName")
            submissions[placement_key(placement)] = arguments
    finally:
        run.restore(saved)
    return {
        "policy": run.policy.model_dump(),
        "candidates": list(run.candidates),
        "requested_capacity": run.requested_capacity,
        "state": run.to_json(),
        "submissions": submissions,
        "first_name": first_job_name(operator, context),
        "identity": batch_job.identity_tags(context["ti"]),
    }


def live_jobs(hook: GPUBatchHook, queues: list[str], first_name: str, identity: dict[str, str]) -> list[dict[str, Any]]:
    """This task try's replacement jobs (``<first_name>-r<N>``, its identity tags) that have not ended."""
    spot = {"identity": identity, "first_name": first_name, "submissions": {q: {"jobQueue": q} for q in queues}}
    return resubmission.live_jobs(hook, spot)

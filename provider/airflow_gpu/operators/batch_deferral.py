"""A deferred ``GPUBatchOperator``: the trigger it waits in, the plan it hands over, and the resume.

``BatchDeferral`` is the operator's deferrable half (a mixin of ``GPUBatchOperator``): it defers
to ``GPUBatchJobTrigger``, which carries the spot run on in the triggerer, and it resumes for the
final job (result, logs, profile) or to fail a deferral that timed out.

The trigger (``triggers.batch_resubmission``) submits the next job itself after a reclaim or a
capacity timeout, so it needs the SubmitJob arguments of every placement the policy may move to:
each candidate accelerator on the requested capacity and on on-demand. They are built here, on
the worker, by the operator's own ``submission_arguments`` (the user's rendered arguments, the
job definition registered for the candidate, the queue, the overrides with the profiler), once
per placement.

A deferral that ends the try without a final job (``execution_timeout``; the trigger crashed, an
``__fail__``; the trigger could not follow the job, ``MAX_TRIGGER_ERRORS`` times) resumes on a
worker that may know only the job of the last deferral; ``live_jobs`` finds the replacements the
trigger submitted, by name and identity tags, and every job of the try is terminated, so that
none runs on beside the job a retry submits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk.exceptions import AirflowException, TaskDeferralError, TaskDeferralTimeout

from airflow_gpu.accelerators import batch_job
from airflow_gpu.accelerators.batch_queues import offered_placement
from airflow_gpu.operators.spot_task import save_run, saved_run
from airflow_gpu.spot import batch as spot_batch
from airflow_gpu.spot.batch import FINAL
from airflow_gpu.spot.policy import Placement
from airflow_gpu.triggers import batch_resubmission as resubmission
from airflow_gpu.triggers.batch_resubmission import placement_key
from airflow_gpu.utils.batch_links import persist_job_links
from airflow_gpu.utils.manifest_delta import delta

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.batch import GPUBatchOperator

JOB_ID_XCOM_KEY = "batch_job_id"
#: Where the run's state is recorded before waiting (Airflow 3.3+ task state store).
STATE_KEY = "airflow_gpu_batch_job"
#: Trigger failures in a row (DescribeJobs keeps failing) before the task gives up on waiting.
MAX_TRIGGER_ERRORS = 3


class _Resubmit:
    """Marker: the job was not the last; submit the next."""


RESUBMIT = _Resubmit()


class BatchDeferral:
    """The deferrable half of ``GPUBatchOperator``: defer, and resume from the trigger's event."""

    def _defer(self, context: Context, errors: int = 0) -> None:
        """Wait in the triggerer, which carries the spot run on: the task comes back for the final job only."""
        from airflow_gpu.triggers.batch import GPUBatchJobTrigger

        op = _operator(self)
        save_run(context, STATE_KEY, op.spot_run)
        op.defer(
            trigger=GPUBatchJobTrigger(
                job_id=str(op.job_id),
                aws_conn_id=op.aws_conn_id,
                region_name=op.hook.conn_region_name,
                poll_interval=op.poll_interval,
                capacity_timeout=op.spot.capacity_timeout,
                deferred_at=time.time(),
                gpu_spot=resubmission_plan(op, context),
                log_lag=op.log_lag if op.awslogs_enabled else None,
                watch_duplicates=list(op._duplicate_watch[:2]) if op._duplicate_watch else None,
            ),
            method_name="resume_after_trigger",
            kwargs={"gpu_state": op.spot_run.to_json(), "errors": errors},
            timeout=op.execution_timeout,
        )

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's resume; a deferral that timed out (``execution_timeout``) or whose trigger failed
        (``__fail__``) terminates the job first, and every replacement the trigger submitted."""
        try:
            return super().resume_execution(next_method, next_kwargs, context)  # type: ignore[misc]
        except TaskDeferralTimeout:
            self._stop_this_try(context, spot_batch.KILLED[1])
            raise
        except TaskDeferralError:  # the trigger crashed: the job it followed, maybe its own, runs on
            self._stop_this_try(context, spot_batch.KILLED[2])
            raise

    def _stop_this_try(self, context: Context, reason: str, job_id: str | None = None) -> None:
        """Terminate this try's jobs before it fails: ``job_id`` (the one the trigger last followed, if
        the worker heard of it), else the one saved at the last deferral, and every ``-r<N>`` of the
        try still running. The known job is saved first, the state closed last: should a call fail
        on the way, a later try still finds the right job."""
        op = _operator(self)
        op._context = context
        saved = saved_run(context, STATE_KEY)
        if saved and (ignored := op.spot_run.restore(saved)):
            op.log.warning("The saved GPU state is ignored: %s", ignored)
        if job_id is not None:
            op.spot_run.submitted(job_id)
            save_run(context, STATE_KEY, op.spot_run)
        op.job_id = job_id or (  # below Airflow 3.3 (no task state store), this try's XCom has the job id
            saved.get("workload") if saved else context["ti"].xcom_pull(task_ids=op.task_id, key=JOB_ID_XCOM_KEY)
        )
        queues = list(op.queues.values()) or [str(op.job_queue)]
        identity = batch_job.identity_tags(context["ti"])
        for job in resubmission.live_jobs(op.gpu_hook, queues, first_job_name(op, context), identity):
            if job["jobId"] != op.job_id:
                op.gpu_hook.terminate(str(job["jobId"]), reason)
                op.log.info("Terminated AWS Batch job %s, which the trigger submitted", job["jobId"])
        op.on_kill(reason)  # the job, then the state closed

    def resume_after_trigger(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        gpu_state: dict[str, Any] | None = None,
        errors: int = 0,
    ) -> Any:
        """Back from the trigger: re-check the job (it may have started since), then as the sync path."""
        from airflow_gpu.triggers.batch import STATE_KEY as EVENT_STATE_KEY

        op = _operator(self)
        op._context = context
        event = event or {}
        saved = event.get(EVENT_STATE_KEY) or gpu_state or saved_run(context, STATE_KEY)
        if saved and (ignored := op.spot_run.restore(saved)):  # ``dag.test()``: the store has the state
            op.log.warning("The saved GPU state is ignored: %s", ignored)
        first = gpu_state.get("workload") if gpu_state else None
        op.job_id = event.get("job_id") or op.spot_run.workload
        if event.get("status") == "error":  # the job runs on: look again, and wait again a few times
            op.log.warning("Waiting for job %s failed: %s", op.job_id, event.get("message"))
            if errors >= MAX_TRIGGER_ERRORS:  # the try fails: its job must not run on beside a retry's
                self._stop_this_try(context, spot_batch.KILLED[2], str(op.job_id))
                raise AirflowException(f"waiting for job {op.job_id} failed {errors + 1} times: {event.get('message')}")
        job = op.gpu_hook.describe_job(str(op.job_id), op.poll_interval)
        if op.job_id != first:  # the trigger submitted it: the XCom and the links follow the job
            op.spot_run.submitted(str(op.job_id))
            save_run(context, STATE_KEY, op.spot_run)
            context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=op.job_id)
            persist_job_links(context, op, op.gpu_hook, job)
        if event.get("status") == "capacity_timeout" and job["status"] == "RUNNABLE":
            job = op._cancel_for_capacity(job)
        if job["status"] not in FINAL:  # started meanwhile (or the trigger failed): wait for it again
            self._defer(context, errors + 1 if event.get("status") == "error" else 0)
        result = op._conclude(context, job)
        if result is not RESUBMIT:
            return result
        op.submit_job(context)
        self._flush_logs(op._log_job(job), settle=True)  # the replacement is on its way meanwhile
        self._defer(context)
        return None

    def _flush_logs(self, job: Mapping[str, Any], settle: bool) -> None:
        """The job has ended: the followed streams read their last lines (after the lag, with
        ``settle``); a deferred task prints every attempt of the job."""
        op = _operator(self)
        if not (op.deferrable and op.awslogs_enabled):
            op.logs.close(settle)
        elif op.gpu_hook.log_group(job) and op.gpu_hook.attempt_streams(job):
            time.sleep(op.log_lag if settle else 0)
            op.logs.print_all(job)


def _operator(mixin: BatchDeferral) -> GPUBatchOperator:
    """The operator this mixin is part of (only ``GPUBatchOperator`` mixes it in)."""
    return cast("GPUBatchOperator", mixin)


def first_job_name(operator: GPUBatchOperator, context: Context) -> str:
    """The name of this task try's first job; its replacements are ``<name>-r<N>``."""
    return batch_job.job_name(str(operator.job_name), getattr(context["ti"], "map_index", -1))


def resubmission_plan(operator: GPUBatchOperator, context: Context) -> dict[str, Any]:
    """The trigger's ``gpu_spot`` argument: the policy, the run's state and the jobs it may submit.

    Each placement the policy may choose is mapped, with the queues this worker read at execute,
    to the placement ``submit_job`` would use (``offered_placement``); the plan carries the moves,
    and the arguments of every placement reachable from where they lead. The current placement's
    arguments travel whole, every other's as a delta from them (``manifest_delta``).
    """
    run = operator.spot_run
    saved = run.to_json()
    moves: dict[Placement, Placement] = {}
    todo = run.reachable_placements()
    while todo:  # a move to a capacity the policy alone would not reach: its candidates are reachable too
        for placement in todo:
            moves[placement] = offered_placement(
                placement, operator.candidates, operator.queues, str(operator.job_queue), operator._offers
            )
        capacities = {to.capacity for to in moves.values()}
        every = [Placement(candidate, capacity) for capacity in capacities for candidate in range(len(run.candidates))]
        todo = [placement for placement in every if placement not in moves]
    arguments: dict[str, dict[str, Any]] = {}
    try:
        for placement in moves:
            run.move_to(placement)
            arguments[placement_key(placement)] = operator.submission_arguments(context, placement)
            arguments[placement_key(placement)].pop("jobName")
    finally:
        run.restore(saved)
    base_key = placement_key(run.placement)
    base = arguments.pop(base_key)
    return {
        "policy": run.policy.model_dump(),
        "candidates": list(run.candidates),
        "requested_capacity": run.requested_capacity,
        "state": run.to_json(),
        "base": base,
        "base_key": base_key,
        "deltas": {key: delta(base, other) for key, other in arguments.items()},
        "moves": {placement_key(p): [to.candidate, to.capacity] for p, to in moves.items() if to != p},
        "first_name": first_job_name(operator, context),
        "identity": batch_job.identity_tags(context["ti"]),
    }

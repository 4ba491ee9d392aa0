"""A deferred training over several machines: what the worker hands ``GPUTrainingJobTrigger``, and takes back.

At deferral the worker builds, with ``GPUKubernetesOperator``'s own pod builder, the Job and Service
of every placement the spot policy may move to (``kubernetes_deferral.replacement_plan``, as for one
pod), so that the triggerer creates the next Job itself after an interruption. The connection is
resolved here, as KPO does, so the triggerer needs no copy of it. The deferral lasts at most what is
left of ``execution_timeout``; past it the task resumes with ``__fail__`` and this try's Jobs are
deleted: a training must not run on, billed, for a failed task. When the trigger itself failed, the
latest Job stays where the next try would take it over (``after_trigger_failure``), and only then.

On the way back, the event names the Job that ended the run and carries the run's state and the
trigger's classification; the worker lists that Job's pods once (the main machine's log holds the
result and profile).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_gpu.operators.kubernetes_deferral import replacement_plan
from airflow_gpu.operators.spot_task import save_run
from airflow_gpu.spot.training_job import JobEnd, JobPods, adoptable, from_json
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.training_job import NAME_TOKEN, job_manifests, newest

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.accelerate_kubernetes import IndexedJobTraining
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
    from airflow_gpu.operators.training_job_cluster import TrainingJobs


def defer(training: IndexedJobTraining, context: Context) -> NoReturn:
    """Hand the current Job, and the spot run with every Job it may create next, to the triggerer."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD, STATE_STORE_KEY
    from airflow_gpu.triggers.training_job import GPUTrainingJobTrigger

    op, launch = training.op, training.launch

    def manifests(pod: Any) -> dict[str, Any]:
        return job_manifests(
            to_dict(pod), NAME_TOKEN, machines=launch.num_machines, port=launch.main_process_port,
            base_container=op.base_container_name, active_deadline_seconds=op.active_deadline_seconds,
        )  # fmt: skip

    plan = replacement_plan(op, context, training.base(context), manifest=manifests)
    trigger = GPUTrainingJobTrigger(
        job_name=str(training.job), namespace=training.namespace, plan=plan, **_connection(op),
        poll_interval=training.poll_interval, capacity_timeout=op.spot.capacity_timeout,
        startup_timeout=float(op.startup_timeout_seconds), grace_period=float(op.termination_grace_period or 30),
        base_container_name=op.base_container_name, get_logs=bool(op.get_logs), deferred_at=time.time(),
    )  # fmt: skip
    save_run(context, STATE_STORE_KEY, op.spot_run)  # open: the run goes on in the triggerer
    training.log.info("Deferring: the triggerer watches training Job %s and carries its spot run on", training.job)
    raise TaskDeferred(trigger=trigger, method_name=RESUME_METHOD, kwargs=None, timeout=_time_left(op, context))


def _connection(op: GPUKubernetesOperator) -> dict[str, Any]:
    """KPO's connection fields for a trigger, with the connection's extras resolved here."""
    from airflow.providers.common.compat.sdk import AirflowNotFoundException
    from airflow.sdk import BaseHook

    op.convert_config_file_to_dict()  # type: ignore[no-untyped-call]
    extras = None
    if op.kubernetes_conn_id:
        try:
            extras = BaseHook.get_connection(op.kubernetes_conn_id).extra_dejson
        except AirflowNotFoundException:
            op.log.warning("Connection %s not found here; the triggerer resolves it itself", op.kubernetes_conn_id)
    return {
        "kubernetes_conn_id": op.kubernetes_conn_id,
        "connection_extras": extras,
        "cluster_context": op.cluster_context,
        "config_dict": op._config_dict,
        "in_cluster": op.in_cluster,
    }


def _time_left(op: GPUKubernetesOperator, context: Context) -> timedelta | None:
    """What is left of ``execution_timeout`` since the try started (a resumed task keeps its start)."""
    if op.execution_timeout is None:
        return None
    started = context["ti"].start_date
    if started is None:
        return op.execution_timeout
    left = started.timestamp() + op.execution_timeout.total_seconds() - time.time()
    return timedelta(seconds=max(left, 1.0))


def ended_job(
    op: GPUKubernetesOperator, jobs: TrainingJobs, event: dict[str, Any], log: Any
) -> tuple[str, JobEnd | None]:
    """The Job named by the trigger's event and how it ended (None: the trigger could not tell), with the
    spot run restored to its state before that end."""
    from airflow_gpu.triggers.kubernetes import STATE_KEY

    state = event.get(STATE_KEY)
    if isinstance(state, dict) and (ignored := op.spot_run.restore(state)):
        log.warning("Ignoring the GPU state carried through the deferral: %s", ignored)
    name = str(event.get("job") or op.spot_run.workload)
    op.spot_run.submitted(name)
    if event.get("status") not in ("success", "failed") or "result" not in event:
        return name, None
    from airflow_gpu.triggers.training_job import MAIN_SEEN_KEY

    pods = JobPods()
    pods.listed(jobs.pods(name))  # the main machine's pod, for its result and profile
    if pods.main() is None and isinstance(seen := event.get(MAIN_SEEN_KEY), dict):
        name_seen = str((seen.get("metadata") or {}).get("name"))
        pods.record(name_seen, seen, deleted=True)  # gone since (its node reclaimed): as the trigger saw it last
    return name, JobEnd(from_json(event["result"]), event.get("culprit"), pods)


def after_trigger_failure(op: GPUKubernetesOperator, jobs: TrainingJobs, context: Context, log: Any) -> None:
    """The trigger crashed (``__fail__``): the Job it followed, or one it made, runs on. Where the next try
    would take it over (``retry_handover``: reattach on, a retry comes; ``take_over``: the run left open in
    the store, as the deferral saved it, and the Job adoptable), the latest Job of this try stays, and every
    other Job and Service of the try goes; as for a single pod. Otherwise all of them go (``remove_this_try``)."""
    from airflow_gpu.operators.retry_handover import why_no_takeover

    why_not = why_no_takeover(op, context)
    ours = jobs.of_task(_this_try(op, context)) if why_not is None else []
    latest = newest(o for o in ours if o["kind"] == "Job")
    if latest is None or not adoptable(latest):
        log.warning("The trigger failed and the next try takes nothing over (%s)", why_not or "no running Job")
        remove_this_try(op, jobs, context, log)
        return
    keep = str(latest["metadata"]["name"])
    for name in sorted({o["metadata"]["name"] for o in ours} - {keep}):
        log.warning("Deleting training Job %s: the next try takes over %s", name, keep)
        jobs.delete(name, grace_seconds=op.termination_grace_period or 30)
    log.warning("The trigger failed; training Job %s runs on for the next try to take over", keep)


def _this_try(op: GPUKubernetesOperator, context: Context) -> dict[str, str]:
    return {k: v for k, v in op._get_ti_pod_labels(context).items() if k != "kubernetes_pod_operator"}


def remove_this_try(op: GPUKubernetesOperator, jobs: TrainingJobs, context: Context, log: Any) -> None:
    """The deferral failed or timed out: every Job and Service of this try goes (the trigger may have made
    some since the deferral), and no later try takes them over."""
    from airflow_gpu.operators.accelerate_kubernetes import STATE_STORE_KEY

    names = {o["metadata"]["name"] for o in jobs.of_task(_this_try(op, context))}
    for name in sorted(names):
        log.warning("Deleting training Job %s: the deferral ended without its trigger's event", name)
        jobs.delete(name, grace_seconds=op.termination_grace_period or 30)
    save_run(context, STATE_STORE_KEY, op.spot_run, open_=False)

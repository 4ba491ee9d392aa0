"""A new try of a multi-machine training: take over the Job an earlier try left running, or delete it.

When a worker dies, Airflow fails its try after the heartbeat timeout and starts the next one;
the training Job it watched runs on. KPO's answer for one pod is to reattach the new try to it
(``reattach_on_restart``, ``durable`` on Airflow 3.3+); a training of several machines is the
costlier one to start over. A new try takes over the latest Job of its task instance when:

* ``reattach_on_restart`` is on (KPO's argument, default True);
* the Job carries the task instance's identity: the labels KPO puts on its pods (dag, task, run,
  map index) and a try no later than this one (``utils.pod_identity``), never a name alone;
* the earlier try did not judge its end: its spot run in the task state store is still open (a
  try that succeeded, failed or was killed closes it). Below Airflow 3.3 there is no store and
  the label search alone decides, as it does for KPO there;
* the Job is running, or complete: a complete Job's result is read rather than trained again
  (the rule of Airflow's ``ResumableJobMixin``); one that failed or is being deleted is not.

Its spot run is restored from the Job's state annotation, written when it was submitted by
whoever submitted it (a worker, or the triggerer after an interruption), so the interruptions
before it are counted once. Every other Job and Service of the task instance is deleted and gone
before anything new is created: never two trainings of one task at once.

Why not ``ResumableJobMixin`` itself: it keeps one job id that the worker writes to the store,
and the Jobs a deferred training's trigger creates are never written there (a trigger has no
store), so the latest Job is found by its labels, and the store says whether it may be taken.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from airflow_gpu.operators import orphaned_try
from airflow_gpu.operators.spot_task import save_run, saved_run
from airflow_gpu.spot.training_job import adoptable, judged
from airflow_gpu.utils import api_retry
from airflow_gpu.utils.pod_identity import identity_mismatch
from airflow_gpu.utils.training_job import newest, saved_state

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.accelerate_kubernetes import IndexedJobTraining
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
    from airflow_gpu.operators.training_job_cluster import TrainingJobs


def take_over(op: GPUKubernetesOperator, jobs: TrainingJobs, context: Context, log: Any) -> str | None:
    """The name of the Job this try takes over (its spot run restored), or None; every other Job and
    Service of the task instance deleted."""
    from airflow_gpu.operators.accelerate_kubernetes import STATE_STORE_KEY

    ours = of_this_task(op, jobs, context, log)
    open_run = saved_run(context, STATE_STORE_KEY, open_only=True)
    closed = open_run is None and saved_run(context, STATE_STORE_KEY) is not None
    latest = newest(o for o in ours if o["kind"] == "Job")
    why_not = _why_not(op, latest, closed)
    keep: str | None = str(latest["metadata"]["name"]) if latest is not None and why_not is None else None
    for name in sorted({o["metadata"]["name"] for o in ours} - {keep}):
        because = f": {why_not}" if latest is not None and name == latest["metadata"]["name"] else ""
        log.warning("Deleting training Job %s left by an earlier try%s", name, because)
        jobs.delete(name, grace_seconds=op.termination_grace_period or 30)
    state = (saved_state(latest) if keep and latest is not None else None) or open_run
    if state is not None and op.reattach_on_restart and (ignored := op.spot_run.restore(state)):
        log.warning("Ignoring the GPU state of the earlier try: %s", ignored)
    if keep is None or latest is None:
        op.spot_run.workload = None  # a new Job, where the earlier try's run left off
        return None
    op.spot_run.submitted(keep)
    save_run(context, STATE_STORE_KEY, op.spot_run)
    try:  # the try that made it, if it lives on orphaned, leaves it to this one (``orphaned_try.linger``)
        api_retry.call(lambda: jobs.batch.patch_namespaced_job(keep, jobs.namespace, orphaned_try.take_over_mark(op)),
                       f"marking Job {keep} as taken over", log=log)  # fmt: skip
    except Exception as error:
        log.error("Could not mark training Job %s as taken over by this try (%s): if the try that made it lives "
                  "on orphaned, it deletes the Job should no machine of it have started", keep, error)  # fmt: skip
    made_by = (latest["metadata"].get("labels") or {}).get("try_number", "?")
    status = "complete" if _complete(latest) else "running"
    log.info("Reattached to training Job %s of try %s (%s) instead of starting the training again", keep, made_by,
             status)  # fmt: skip
    return keep


def of_this_task(op: GPUKubernetesOperator, jobs: TrainingJobs, context: Context, log: Any) -> list[dict[str, Any]]:
    """The Jobs and Services of this task instance made by this try or an earlier one: its identity labels
    match, never a name alone (``utils.pod_identity``); any other is left alone, with a line saying why."""
    ti = context["ti"]
    labels = op._get_ti_pod_labels(context, include_try_number=False)
    labels.pop("kubernetes_pod_operator", None)
    ours = []
    for found in jobs.of_task(labels):
        metadata = found["metadata"]
        mismatch = identity_mismatch(
            metadata.get("labels") or {}, metadata.get("uid"), expected=labels, try_number=ti.try_number
        )
        if mismatch:
            log.info("Leaving %s %s alone: %s", found["kind"], metadata["name"], mismatch)
        else:
            ours.append(found)
    return ours


def _why_not(op: GPUKubernetesOperator, latest: Any, closed: bool) -> str | None:
    """Why the latest Job is not taken over (None: it is)."""
    if latest is None:
        return "no Job"
    if not op.reattach_on_restart:
        return "reattach_on_restart is off"
    if closed:
        return "the earlier try judged its end"
    if not adoptable(latest):
        return "it failed, or is being deleted"
    return None


def _complete(job: Any) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def left_orphaned(run: IndexedJobTraining, context: Context) -> None:
    """This try's supervisor died (``orphaned_try``): its log followers stop, and the Job runs on for a retry
    that takes it over, watched until one does (``orphaned_try.linger``: deleted if it never started), or is
    deleted now when none will. No log line: they fail here (``orphaned_try.SILENT``)."""
    from airflow_gpu.operators.retry_handover import why_no_takeover
    from airflow_gpu.operators.training_job_cluster import TrainingJobs

    if run.logs is not None:
        run.logs.stop()
    name, op = str(run.job), run.op
    jobs = TrainingJobs(op.client, run.namespace, orphaned_try.SILENT)

    def delete() -> None:
        with contextlib.suppress(Exception):
            jobs.delete(name, wait=False)

    if run._judged or why_no_takeover(op, context) is not None:
        return delete()
    orphaned_try.linger(op, context, lambda: jobs.read(name), _running, delete, started=_started)
    return None


def _running(job: Any) -> bool:
    """Neither judged (complete or failed) nor being deleted: what would train on for nobody."""
    return not judged(job) and not (job.get("metadata") or {}).get("deletionTimestamp")


def _started(job: Any) -> bool:
    """A machine is ready or done: training that deleting would throw away (left to ``airflow-gpu reap``)."""
    status = job.get("status") or {}
    return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) > 0

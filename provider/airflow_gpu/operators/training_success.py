"""A multi-machine Kubernetes training's success, recorded before its Job is deleted and its run closed,
and taken over by a retry (``success_mark``: the window between reading a training's success and the task
instance turning ``success``).

The nineteenth soak (seed 795738838) found the window here: a deferred two-machine training's resume read
its Job's success, deleted the Job and closed its saved run, and its worker was SIGKILLed 70 ms later.
The retry found no Job to take over and a run an earlier try had judged (``training_job_reattach`` never
takes such a run over), so it created a new Job: the whole training ran twice, on GPUs. The record is
written first, with the result already read from the main machine's log and the spot run's state, under
the same key and clearing rules as a pod's or a Batch job's (``success_mark``), with its own backend.

Taking over ends the retry as the earlier try would have ended: the recorded result and interruptions,
where the training ran, and every Job and Service of the task instance deleted (the recorded one most
likely is already). The GPU profile is not read again: the machines' logs went with their pods.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from airflow_gpu.operators import success_mark
from airflow_gpu.operators.retry_rule import why_no_takeover
from airflow_gpu.operators.spot_task import publish, save_run

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.accelerate_kubernetes import IndexedJobTraining

#: The success record's backend (``success_mark.recorded``: a pod's record is never a training's).
BACKEND = "training"


def record(run: IndexedJobTraining, context: Context, location: str | None) -> bool:
    """Before the Job is deleted and the run closed: a retry after this worker dies takes the success over.
    A result line that is not JSON records nothing: this try fails on it, and a retry trains again. False when
    the record could not be written and a retry would take the Job over: the caller keeps it (``unrecorded_pod``
    says why, for a pod)."""
    try:
        result = run._result()
    except Exception:  # ``spot_task.bad_result``: raised by the caller once the Job is deleted
        return True
    output = run.op._output
    unread = run.op._unread if output is None else output.unread  # why no result, for the retry's warning
    try:
        success_mark.record(context, str(run.job), result, run.op.spot_run.to_json(), location, BACKEND, unread)
    except Exception as error:  # the success stands; the Job keeps it for a retry until the run is closed
        why_not = why_no_takeover(run.op, context)  # none comes: the Job goes as before
        with contextlib.suppress(Exception):  # an orphan's log line fails
            run.log.warning("Could not record the training's success in the task state store (%s); Job %s %s",
                            error, run.job, f"is deleted all the same: {why_not}" if why_not else
                            "is kept for a retry to take over")  # fmt: skip
        return why_not is not None
    return True


def recorded(run: IndexedJobTraining, context: Context) -> dict[str, Any] | None:
    """An earlier try's record of a training success that this try takes over (``reattach_on_restart``, as
    for a pod: off, every try trains)."""
    return success_mark.recorded(context, BACKEND) if run.op.reattach_on_restart else None


def take_over(run: IndexedJobTraining, context: Context, mark: dict[str, Any]) -> Any:
    """End this try with the recorded success; no Job is created."""
    from airflow_gpu.operators.accelerate_kubernetes import STATE_STORE_KEY
    from airflow_gpu.operators.training_job_reattach import of_this_task

    op, earlier = run.op, mark["try_number"]
    run.job, run._judged = str(mark["workload"]), True
    run.log.info("Try %s read training Job %s's success, and its worker ended before the task did: its result is "
                 "this try's, and the training is not run again", earlier, run.job)  # fmt: skip
    if ignored := op.spot_run.restore(mark["run"]):
        run.log.warning("The recorded run state is not usable (%s); its interruptions are not published", ignored)
    try:
        left = {str(found["metadata"]["name"]) for found in of_this_task(op, run.jobs, context, run.log)}
    except Exception as error:  # the success stands: the Jobs' ttlSecondsAfterFinished removes what is left
        run.log.warning("Could not list the task's training Jobs to delete them (%s); deleting Job %s only",
                        error, run.job)  # fmt: skip
        left = {run.job}
    for name in sorted(left | {run.job}):
        with contextlib.suppress(Exception):  # being deleted by the try that read it, most likely
            run.jobs.delete(name, wait=False)
    save_run(context, STATE_STORE_KEY, op.spot_run, open_=False)
    location = mark.get("location")
    publish(context, op.spot_run, location)
    op._output = None
    op._unread = f"try {earlier} read it, and its worker ended before the task did; its GPU profile went with it"
    op._publish_profile(context, run.job, location)
    op._unread = mark.get("unread")  # a success without a result: the reason that try had (``result_missing``)
    return mark.get("result")

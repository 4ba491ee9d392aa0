"""A ``GPUBatchOperator`` try's success, recorded before its run is closed and taken over by a retry
(``success_mark``: the window between reading a job's success and the task instance turning ``success``).

Taking over ends the retry as the earlier try would have ended: the recorded result and interruptions,
the queue the job ran in, and what a new try's XCom lacks (Airflow clears it at each try's start): the
job id, the job's console links and its GPU profile. Those are read again from the job and its log,
which outlive the try; a read that fails (AWS Batch describes a job for about seven days after it
ends, a throttle outlasting the retries, an access denied) costs its link or profile, never the
success the record holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_gpu.operators import success_mark
from airflow_gpu.operators.gpu_profile import publish_profile
from airflow_gpu.operators.spot_task import publish, save_run
from airflow_gpu.spot import batch as spot_batch
from airflow_gpu.utils.batch_links import persist_job_links, persist_log_link

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The success record's backend (``success_mark.recorded``: a pod's record is never a job's).
BACKEND = "batch"


def record(op: Any, context: Context, job: dict[str, Any], result: Any) -> None:
    """Before the run is closed: a retry after this worker dies takes the success over."""
    try:
        success_mark.record(context, job["jobId"], result, op.spot_run.to_json(), spot_batch.queue_name(job), BACKEND)
    except Exception as error:  # the success stands; only a crash after it would run the workload again
        op.log.warning("Could not record the job's success in the task state store (%s)", error)


def take_over(op: Any, context: Context, mark: dict[str, Any], state_key: str, job_id_key: str) -> Any:
    """End this try of ``op`` with the recorded success; nothing is submitted."""
    earlier, op.job_id = mark["try_number"], str(mark["workload"])
    op.log.info("Try %s read job %s's success, and its worker ended before the task did: its result is this "
                "try's, and the workload is not run again (its output is in the job's log: the CloudWatch "
                "link)", earlier, op.job_id)  # fmt: skip
    if ignored := op.spot_run.restore(mark["run"]):
        op.log.warning("The recorded run state is not usable (%s); its interruptions are not published", ignored)
    context["ti"].xcom_push(key=job_id_key, value=op.job_id)
    _read_again(op, context)
    save_run(context, state_key, op.spot_run, open_=False)
    publish(context, op.spot_run, mark.get("location"))
    return mark.get("result") if op.do_xcom_push else None


def _read_again(op: Any, context: Context) -> None:
    """The job's links and GPU profile, from the job and its log; a warning where they cannot be read."""
    unread = None
    try:
        job = op.gpu_hook.describe_jobs_batched([op.job_id]).get(op.job_id)
        if job is None:
            unread = f"job {op.job_id} is no longer described by AWS Batch"
        else:
            persist_job_links(context, op, op.gpu_hook, job)
            logged = op._log_job(job)  # a multi-node job's main node holds the log
            persist_log_link(context, op, op.gpu_hook, logged)
            if op.gpu_profile:
                output = op.gpu_hook.read_output(logged, op.log_lag, result=False, profile=op._wrapped)
                op._publish_profile(context, logged, output)
            return
    except Exception as error:
        unread = f"job {op.job_id} could not be read again ({type(error).__name__}: {error})"
    op.log.warning("The links and GPU profile of job %s are not published: %s", op.job_id, unread)
    if op.gpu_profile:
        publish_profile(context, None, run=op.spot_run, accelerator=op.accelerator, workload=op.job_id,
                        instance_type=None, log=op.log, unread=unread)  # fmt: skip

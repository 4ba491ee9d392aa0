"""The previous try's first AWS Batch job, which that try created but never saved: found by its name and tags.

A ``GPUBatchOperator`` try saves its run (the job it follows) in the task state store right after
SubmitJob answers, so that a retry after its worker died takes the job over (``earlier_job``). When
SubmitJob's answer is lost (a 500 after the job was created, a dropped connection) the try looks the
job up by name before it sends it again (``batch_submit``); a try whose worker is killed in that
pause saves nothing, and the job runs on for nobody. The twenty-sixth soak (seed 1556083924,
``soak_fanout_batch`` shard 49): try 1's SubmitJob met a 500 and its worker was killed a second
later; its job ran and succeeded, and try 2, which found no saved run, submitted the shard again.

So a try with no open run to take over looks for the previous try's first job (the name every try's
first submission has, ``first_job_name``; the identity tags with that try's number) in the queues it
submits to. Not the job its saved run names (that try judged it, or ``earlier_job`` had it), nor one
that failed (nothing to read: the run starts anew). A job found is taken over as a saved one is:
followed while it runs, its success read and returned, never submitted again. A second job of that
name and try (a lost answer sent again) still running is stopped as a duplicate. Only the previous
try's: an older try's unsaved job was that try's retry's to find, and a job of a try a Clear came
after was read or judged by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_gpu.accelerators.batch_job import TRY_TAG, identity_tags, job_name
from airflow_gpu.hooks import batch_submit
from airflow_gpu.spot.batch import FINAL
from airflow_gpu.triggers.batch_resubmission import oldest_of_try, same_task_try

if TYPE_CHECKING:
    from airflow.sdk import Context


def unsaved_first_job(op: Any, context: Context, saved: str | None) -> dict[str, Any] | None:
    """The previous try's first job that no saved run names (``saved``: the workload of the run in the store,
    open or closed), described; None when there is none, or it failed. ``op``: a ``GPUBatchOperator`` (not
    imported: the operator imports this module)."""
    ti = context["ti"]
    previous = int(ti.try_number) - 1
    if previous < 1:
        return None
    identity = {**identity_tags(ti), TRY_TAG: str(previous)}
    name = job_name(str(op.job_name), getattr(ti, "map_index", -1))  # ``batch_deferral.first_job_name``

    def ours(job: Any) -> bool:
        return job["jobId"] != saved and same_task_try(job, identity)

    chosen: list[Any] = []

    def keep(jobs: Any) -> Any:  # a failed one holds nothing to read: the oldest of the others, as listed
        kept = oldest_of_try([j for j in jobs if ours(j) and j["status"] != "FAILED"], identity)
        chosen[:] = [kept] if kept is not None else []
        return kept

    queues = sorted(set(op.queues.values())) if op.queues else [str(op.job_queue)]
    for queue in queues:
        if batch_submit.stop_duplicates(op.gpu_hook, queue, name, keep, ours, FINAL) is None:
            continue
        job = dict(chosen[0])
        op.log.info("Took over job %s (%s, %s) of try %s, which submitted it and ended before it could save it, "
                    "instead of submitting it again", job["jobId"], name, job["status"], previous)  # fmt: skip
        return job
    return None

"""Where moto's Batch differs from AWS in ways the emulator cannot work around from outside.

moto keeps one set of classes per process, so these replacements are installed when the first
emulator of a process starts and removed when the last one stops (``apply`` / ``restore``):

* SubmitJob (no-Docker backend) finishes every job inside the call: here it only records an
  ``EmulatedJob`` (and the array children), and the driver runs it.
* CancelJob: moto checks the status and then terminates, two steps the driver could interleave
  with; here the check and the cancel are one step under the job's lock (``EmulatedJob.cancel``).
* CreateJobQueue / UpdateJobQueue drop ``jobStateTimeLimitActions`` and DescribeJobQueues never
  returns them: here they are validated (``queues.py``), kept on the queue and described.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from moto.batch.exceptions import ClientException
from moto.batch.models import BatchBackend, JobQueue
from moto.batch.responses import BatchResponse
from moto.batch_simple.models import BatchSimpleBackend

from airflow_gpu.testing.batch.queues import validate_time_limit_actions

_original: dict[tuple[type, str], Any] = {}
_lock = threading.Lock()


def submit_job(
    self: Any,
    job_name: str,
    job_def_id: str,
    job_queue: str,
    array_properties: dict[str, Any],
    depends_on: list[dict[str, str]] | None = None,
    container_overrides: dict[str, Any] | None = None,
    eks_properties_override: dict[str, Any] | None = None,
    timeout: dict[str, int] | None = None,
    parameters: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
) -> tuple[str, str, str]:
    """SubmitJob for the no-Docker backend: record the job (and array children) and return at once."""
    from airflow_gpu.testing.batch.jobs import EmulatedJob

    job_def = self.get_job_definition(job_def_id)
    if job_def is None:
        raise ClientException(f"Job definition {job_def_id} does not exist")
    queue = self.get_job_queue(job_queue)
    if queue is None:
        raise ClientException(f"Job queue {job_queue} does not exist")
    common = {
        "log_backend": self.logs_backend,
        "container_overrides": container_overrides,
        "eks_properties_override": eks_properties_override,
        "depends_on": depends_on,
        "all_jobs": self.backend._jobs,
        "timeout": timeout,
        "parameters": parameters,
    }
    job = EmulatedJob(job_name, job_def, queue, self, array_properties=array_properties, tags=tags, **common)
    size = int(array_properties.get("size") or 0)
    if size:
        job._child_jobs = [
            EmulatedJob(
                job_name,
                job_def,
                queue,
                self,
                array_properties={"statusSummary": {}, "index": i},
                provided_job_id=f"{job.job_id}:{i}",
                array_index=i,
                **common,
            )
            for i in range(size)
        ]
        for child in job._child_jobs:
            self.backend._jobs[child.job_id] = child
    self.backend._jobs[job.job_id] = job
    return job_name, job.job_id, job.arn


def cancel_job(self: Any, job_id: str, reason: str) -> None:
    """CancelJob: only a job that has not started is cancelled; the call succeeds either way."""
    from airflow_gpu.testing.batch.jobs import EmulatedJob

    job = self.get_job_by_id(job_id) if job_id and reason else None
    if isinstance(job, EmulatedJob):
        job.cancel(reason)
    else:  # moto's own checks and answers (empty id or reason, jobs of no emulator)
        _original[(BatchBackend, "cancel_job")](self, job_id, reason)


def _keep_time_limit_actions(response: Any, queue_arn: str) -> None:
    actions = response._get_param("jobStateTimeLimitActions")
    if actions is None:
        return
    queue = response.batch_backend.get_job_queue(queue_arn)
    if queue is not None:
        queue.job_state_time_limit_actions = [dict(a) for a in actions]


def _check_time_limit_actions(response: Any) -> None:
    problem = validate_time_limit_actions(response._get_param("jobStateTimeLimitActions") or [])
    if problem:
        raise ClientException(problem)


def createjobqueue(self: Any) -> str:
    _check_time_limit_actions(self)
    answer: str = _original[(BatchResponse, "createjobqueue")](self)
    _keep_time_limit_actions(self, json.loads(answer)["jobQueueArn"])
    return answer


def updatejobqueue(self: Any) -> str:
    _check_time_limit_actions(self)
    answer: str = _original[(BatchResponse, "updatejobqueue")](self)
    _keep_time_limit_actions(self, json.loads(answer)["jobQueueArn"])
    return answer


def describe_job_queue(self: Any) -> dict[str, Any]:
    result: dict[str, Any] = _original[(JobQueue, "describe")](self)
    actions = getattr(self, "job_state_time_limit_actions", None)
    if actions:
        result["jobStateTimeLimitActions"] = [dict(a) for a in actions]
    return result


REPLACEMENTS: tuple[tuple[type, str, Any], ...] = (
    (BatchSimpleBackend, "submit_job", submit_job),
    (BatchBackend, "cancel_job", cancel_job),
    (BatchResponse, "createjobqueue", createjobqueue),
    (BatchResponse, "updatejobqueue", updatejobqueue),
    (JobQueue, "describe", describe_job_queue),
)


def apply() -> None:
    with _lock:
        if _original:
            return
        for owner, name, replacement in REPLACEMENTS:
            _original[(owner, name)] = owner.__dict__[name]
            setattr(owner, name, replacement)


def restore() -> None:
    with _lock:
        for (owner, name), original in _original.items():
            setattr(owner, name, original)
        _original.clear()

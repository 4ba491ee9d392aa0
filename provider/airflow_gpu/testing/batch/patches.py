"""Where moto's Batch differs from AWS in ways the emulator cannot work around from outside.

moto keeps one set of classes per process, so these replacements are installed when the first
emulator of a process starts and removed when the last one stops (``apply`` / ``restore``):

* SubmitJob (no-Docker backend) finishes every job inside the call: here it only records an
  ``EmulatedJob`` (and the array children), and the driver runs it.
* CancelJob: moto checks the status and then terminates, two steps the driver could interleave
  with; here the check and the cancel are one step under the job's lock (``EmulatedJob.cancel``).
* CreateJobQueue / UpdateJobQueue drop ``jobStateTimeLimitActions`` and DescribeJobQueues never
  returns them: here they are validated (``queues.py``), kept on the queue and described.
* Multi-node parallel jobs: moto registers any ``nodeProperties`` unchecked, DescribeJobDefinitions
  leaves them out, SubmitJob drops ``nodeOverrides`` and ListJobs ignores ``multiNodeJobId``. Here
  RegisterJobDefinition and SubmitJob refuse what AWS refuses (``multinode.py``), a multinode job is
  a ``MultiNodeJob`` (``nodes.py``) the driver runs node by node, and ListJobs lists its nodes.
* ListJobs is eventually consistent on AWS: a job just submitted may be missing from it for a while.
  moto lists it at once; with the emulator's ``list_lag`` (kept on the backend as
  ``emulator_list_lag``) a job is left out of ListJobs until that many seconds after its creation.
* The EC2 backend loads moto's catalogue of public AMIs (a few thousand, parsed from JSON) whenever
  a region's backend is made or reset, as every emulator's start does: two fifths of a start's CPU.
  The emulator's account runs no EC2 instance (its compute environments keep ``minvCpus`` 0 and
  the driver runs jobs as processes), so here the catalogue is not loaded.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import Any

from moto.batch.exceptions import ClientException
from moto.batch.models import BatchBackend, JobDefinition, JobQueue
from moto.batch.responses import BatchResponse
from moto.batch_simple.models import BatchSimpleBackend
from moto.ec2.models.amis import AmiBackend

import airflow_gpu.testing.batch.multinode as multinode
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
    node_overrides: dict[str, Any] | None = None,
) -> tuple[str, str, str]:
    """SubmitJob for the no-Docker backend: record the job (and array children) and return at once."""
    from airflow_gpu.testing.batch.jobs import EmulatedJob
    from airflow_gpu.testing.batch.nodes import MultiNodeJob

    job_def = self.get_job_definition(job_def_id)
    if job_def is None:
        raise ClientException(f"Job definition {job_def_id} does not exist")
    queue = self.get_job_queue(job_queue)
    if queue is None:
        raise ClientException(f"Job queue {job_queue} does not exist")
    problem = _check_multinode_submission(job_def, array_properties, container_overrides, node_overrides)
    if problem:
        raise ClientException(problem)
    common = {
        "log_backend": self.logs_backend,
        "container_overrides": container_overrides,
        "eks_properties_override": eks_properties_override,
        "depends_on": depends_on,
        "all_jobs": self.backend._jobs,
        "timeout": timeout,
        "parameters": parameters,
    }
    if job_def.type == "multinode":
        job: EmulatedJob = MultiNodeJob(
            job_name, job_def, queue, self, array_properties={}, tags=tags, node_overrides=node_overrides, **common
        )
        self.backend._jobs[job.job_id] = job
        return job_name, job.job_id, job.arn
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


def _check_multinode_submission(
    job_def: Any,
    array_properties: dict[str, Any] | None,
    container_overrides: dict[str, Any] | None,
    node_overrides: dict[str, Any] | None,
) -> str | None:
    """What SubmitJob refuses in combining a job definition's type with the overrides sent, or None."""
    if job_def.type != "multinode":
        if node_overrides:
            return "nodeOverrides are for multi-node parallel jobs: the job definition's type is not multinode"
        return None
    if container_overrides:
        return "containerOverrides don't apply to a multi-node parallel job: send nodeOverrides.nodePropertyOverrides"
    if (array_properties or {}).get("size"):
        return "a multi-node parallel job can't be an array job: leave out arrayProperties"
    return multinode.validate_overrides(job_def.node_properties, node_overrides)


def submitjob(self: Any) -> str:
    """moto's SubmitJob, passing ``nodeOverrides`` on instead of dropping it."""
    node_overrides = self._get_param("nodeOverrides")
    extra = {"node_overrides": node_overrides} if node_overrides is not None else {}  # moto's own backend takes none
    name, job_id, job_arn = self.batch_backend.submit_job(
        self._get_param("jobName"),
        self._get_param("jobDefinition"),
        self._get_param("jobQueue"),
        depends_on=self._get_param("dependsOn"),
        container_overrides=self._get_param("containerOverrides"),
        eks_properties_override=self._get_param("eksPropertiesOverride"),
        timeout=self._get_param("timeout"),
        array_properties=self._get_param("arrayProperties", {}),
        parameters=self._get_param("parameters"),
        tags=self._get_param("tags"),
        **extra,
    )
    return json.dumps({"jobId": job_id, "jobName": name, "jobArn": job_arn})


def registerjobdefinition(self: Any) -> str:
    """RegisterJobDefinition, refusing the node properties AWS refuses (moto checks none)."""
    job_type = self._get_param("type")
    problem = multinode.validate_definition(
        job_type,
        self._get_param("nodeProperties"),
        self._get_param("containerProperties"),
        self._get_param("eksProperties"),
        self._get_param("platformCapabilities"),
    )
    if problem:
        raise ClientException(problem)
    answer: str = _original[(BatchResponse, "registerjobdefinition")](self)
    if job_type == "multinode":  # moto's new revision keeps the previous one's containerProperties
        registered = self.batch_backend.get_job_definition(json.loads(answer)["jobDefinitionArn"])
        if registered is not None:
            registered.container_properties = None
    return answer


def describe_job_definition(self: Any) -> dict[str, Any]:
    result: dict[str, Any] = _original[(JobDefinition, "describe")](self)
    if self.node_properties is not None:
        result["nodeProperties"] = self.node_properties
    return result


def listjobs(self: Any) -> str:
    """ListJobs; ``multiNodeJobId`` lists that multi-node parallel job's nodes (moto lists nothing)."""
    from airflow_gpu.testing.batch.nodes import MultiNodeJob

    parent_id = self._get_param("multiNodeJobId")
    if not parent_id:
        answer: str = _original[(BatchResponse, "listjobs")](self)
        return _without_recent(self.batch_backend, answer)
    parent = self.batch_backend.get_job_by_id(parent_id)
    nodes = list(parent.nodes.values()) if isinstance(parent, MultiNodeJob) else []
    status = self._get_param("jobStatus")
    shown = [node.describe_short() for node in nodes if status is None or node.status == status]
    return json.dumps({"jobSummaryList": shown})


def _without_recent(backend: Any, answer: str) -> str:
    """ListJobs' answer without the jobs created less than the backend's ``emulator_list_lag`` seconds ago."""
    lag = float(getattr(backend, "emulator_list_lag", 0.0) or 0.0)
    if lag <= 0:
        return answer
    listed = json.loads(answer)
    since = datetime.now() - timedelta(seconds=lag)  # moto's job_created_at: a naive local datetime.now()

    def shown(summary: dict[str, Any]) -> bool:
        job = backend._jobs.get(summary.get("jobId"))
        return job is None or job.job_created_at <= since

    listed["jobSummaryList"] = [s for s in listed.get("jobSummaryList") or [] if shown(s)]
    return json.dumps(listed)


def cancel_job(self: Any, job_id: str, reason: str) -> None:
    """CancelJob: only a job that has not started is cancelled; the call succeeds either way."""
    from airflow_gpu.testing.batch.jobs import EmulatedJob

    job = self.get_job_by_id(job_id) if job_id and reason else None
    if isinstance(job, EmulatedJob):
        job.cancel(reason, at_head=bool(getattr(self, "emulator_cancel_at_head", False)))
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


def load_no_amis(self: AmiBackend) -> None:
    """``AmiBackend._load_amis`` loading nothing: see the module's docstring."""


REPLACEMENTS: tuple[tuple[type, str, Any], ...] = (
    (BatchSimpleBackend, "submit_job", submit_job),
    (BatchResponse, "submitjob", submitjob),
    (BatchResponse, "registerjobdefinition", registerjobdefinition),
    (BatchResponse, "listjobs", listjobs),
    (JobDefinition, "describe", describe_job_definition),
    (BatchBackend, "cancel_job", cancel_job),
    (BatchResponse, "createjobqueue", createjobqueue),
    (BatchResponse, "updatejobqueue", updatejobqueue),
    (JobQueue, "describe", describe_job_queue),
    (AmiBackend, "_load_amis", load_no_amis),
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

"""How Batch drives a multi-node parallel (MNP) job: all its instances at once, main node first.

The rules, from the AWS Batch User Guide ("Multi-node parallel jobs" and "Job lifecycle for MNP
jobs"), each one step of ``step``:

* "AWS Batch provisions the instance capacity that's required to run your job and launches these
  instances": the job leaves RUNNABLE only when one compute environment of its queue can give it
  ``numNodes`` instances of one instance type at once ("nodes are single-tenant", "all node groups in
  a multi-node parallel job must use the same instance type"): ``placement.place_nodes``.
* "The main node is launched first and it moves to the STARTING status ... When the main node reaches
  the RUNNING status after the node's container is running, the child nodes are launched and they
  also move to the STARTING status."
* "If the main node exits, the job is considered finished, and all of the child nodes are stopped.
  If a child node dies, AWS Batch doesn't take any action on the other nodes in the job." and "The
  final job status (SUCCEEDED or FAILED) is determined by the final job status of the main node."
  A failed child therefore fails only itself: the application must notice it (and stop the main
  node) if the job should fail. Stopping a child is SIGTERM, then SIGKILL after the stop timeout,
  as for TerminateJob; its status follows its exit code and its ``statusReason`` is "Essential
  container in task exited" (what AWS writes for a child it stops is not documented).
* "If you specify job retries, a main node failure causes another attempt to occur. Child node
  failures don't cause more attempts to occur. Each new attempt of a multi-node parallel job updates
  the corresponding attempt of its associated child nodes." The job's ``retryStrategy`` is applied
  to the main node's attempt (its ``statusReason``, ``reason`` and exit code); a new attempt waits
  until every node of the last one has stopped, then relaunches them all.
* TerminateJob on the job terminates every node (CancelJob acts only before it starts: then no node
  exists yet). TerminateJob on one node (``<jobId>#<n>``) terminates that node only.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol

from moto.batch.models import BatchBackend

from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing.batch.jobs import EmulatedJob
from airflow_gpu.testing.batch.nodes import MultiNodeJob, NodeJob
from airflow_gpu.testing.batch.placement import place_nodes
from airflow_gpu.testing.batch.reasons import Blocked
from airflow_gpu.testing.batch.retry import action_after_attempt

STARTED = ("STARTING", "RUNNING")


class Driver(Protocol):
    """What stepping an MNP job needs from the driver that runs its nodes (``driver.BatchDriver``).

    Declared here rather than imported, so that the driver can call ``step`` without the two modules
    importing each other.
    """

    @property
    def backend(self) -> BatchBackend: ...  # the node jobs join its ``_jobs``, as DescribeJobs reads them

    @property
    def offers(self) -> Mapping[str, tuple[InstanceOffer, ...]]: ...

    @property
    def max_vcpus(self) -> Mapping[str, int]: ...

    @property
    def stalled(self) -> Mapping[str, str | None]: ...

    def capacity_types(self) -> dict[str, str]: ...

    def _step_submitted(self, job: EmulatedJob, now: float) -> None: ...

    def _finish(self, job: EmulatedJob, status: str, reason: str | None) -> None: ...


def step(driver: Driver, job: MultiNodeJob, now: float) -> None:
    """Move the MNP ``job`` one step; its nodes are stepped by the driver as container jobs."""
    if job.status in ("SUBMITTED", "PENDING"):
        driver._step_submitted(job, now)
    elif job.status == "RUNNABLE":
        _step_runnable(driver, job)
    elif job.status in STARTED:
        _step_started(driver, job)


def _step_runnable(driver: Driver, job: MultiNodeJob) -> None:
    with job.lock:  # a CancelJob either lands before this or finds the job STARTING
        job.take_cancel()
        if job.termination is not None:
            driver._finish(job, "FAILED", job.termination)
            return
    if any(not node.finished for node in job.nodes.values()):
        return  # the last attempt's nodes are still being stopped
    placement = place_nodes(job, driver.offers, driver.max_vcpus, driver.stalled, driver.capacity_types())
    with job.lock:
        job.take_cancel()
        if job.termination is not None:
            driver._finish(job, "FAILED", job.termination)
            return
        if isinstance(placement, Blocked):
            job.blocked = placement
            return
        job.blocked = None
        job.compute_environment, job.offer = placement
        job.instance_type = job.offer.instance_type.name
        job.job_stopped_reason = None
        job.children_launched = False
        job.status = "STARTING"
    _launch(driver, job, job.main_index, attempt=len(job.main.attempts) + 1 if job.main else 1)


def _launch(driver: Driver, job: MultiNodeJob, index: int, attempt: int) -> None:
    """Launch node ``index`` on an instance of its own (created the first time: its ``createdAt``)."""
    node = job.nodes.get(index)
    if node is None:
        node = NodeJob(job, job.plan[index])
        job.nodes[index] = node
        driver.backend._jobs[node.job_id] = node
    node.compute_environment, node.offer, node.instance_type = job.compute_environment, job.offer, job.instance_type
    node.instance_id = f"i-{uuid.uuid4().hex[:17]}"
    node.relaunch(attempt)


def _step_started(driver: Driver, job: MultiNodeJob) -> None:
    main = job.main
    assert main is not None
    if job.termination is not None:
        for node in job.nodes.values():
            node.terminate(job.termination)
    if not main.finished:
        if main.status in STARTED:
            job.status = main.status
        if main.status == "RUNNING" and not job.children_launched:
            job.children_launched = True
            for plan in job.plan:
                if plan.index != job.main_index:
                    _launch(driver, job, plan.index, attempt=main.job_attempt)
        return
    for node in job.nodes.values():  # the job is over: Batch stops the child nodes
        if node is not main and not node.finished:
            node.halted = True
    if main.status == "SUCCEEDED":
        driver._finish(job, "SUCCEEDED", main.job_stopped_reason)
        return
    attempt = main.latest_attempt or {}
    action = (
        action_after_attempt(
            job.job_definition.retry_strategy,
            attempts_so_far=len(main.attempts),
            status_reason=main.job_stopped_reason,
            reason=(attempt.get("container") or {}).get("reason"),
            exit_code=main.exit_code,
        )
        if job.termination is None and main.attempts
        else "EXIT"
    )
    if action == "RETRY":
        job.status = "RUNNABLE"
        job.compute_environment = job.instance_id = job.instance_type = job.offer = None
        return
    driver._finish(job, "FAILED", main.job_stopped_reason)

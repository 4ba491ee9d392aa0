"""``AccelerateTrainOperator`` on Kubernetes: one GPU pod, or an Indexed Job of machines.

One machine is a ``GPUKubernetesOperator`` pod running ``accelerate launch``: its spot run,
fallback, deferral, profile and result are that operator's. Several machines are an Indexed Job
(``completionMode: Indexed``, ``completions = parallelism = num_machines``) and a headless Service,
the shape the Kubernetes docs give for "Indexed Job with pod-to-pod communication" (built in
``utils.training_job`` from the pod ``GPUKubernetesOperator`` would create, so one machine and
many look alike on the nodes): each pod's hostname is ``<job>-<index>``, its subdomain the
Service, so ``<job>-0.<service>`` is the main machine; ``JOB_COMPLETION_INDEX`` is the rank.
cncf-kubernetes' ``KubernetesJobOperator`` builds its pod without the GPU placement, creates no
Service and does not restart on preemption, hence this module.

The Job's ``backoffLimit`` is 0: a rank that dies (a spot reclaim) ends the whole Job. Its end is
classified (``spot.training_job``, the same code whether the worker or the triggerer watched it),
counted once per Job in the operator's spot run, and the Job is created again within the policy
(or the task fails as the policy says). With ``deferrable=True`` the worker creates the Job and
defers to ``GPUTrainingJobTrigger``, which carries the spot run on (the next Jobs are its own) and
hands the task back for the final Job only: its result, profile, spot record and cleanup.

Jobs and Services are named per task try and submission (``<name>-<digest>[-r<N>]``) and deleted
with ``propagationPolicy: Foreground`` (the API's default for a Job is to orphan its pods) at the
end, on failure and on kill. A new try after a worker crash takes over the Job an earlier try left
running (``reattach_on_restart``, KPO's argument, on by default), or deletes it
(``training_job_reattach``); a retry after a try that read the training's success and then died takes
that success over (``training_success``). Any other exception that leaves ``execute`` (an API server down past
the retry budget, a bug) deletes the try's Job and Service, as KPO's ``cleanup()`` does for its
pod, unless the next try would take the running Job over (``retry_handover``: a retry comes,
reattach is on, the run is still open); Jobs also carry ``ttlSecondsAfterFinished``
(``utils.training_job``) as a backstop.

Ranks the API refuses to create (a ResourceQuota, a LimitRange, PodSecurity, a webhook) leave only
``FailedCreate`` events: fewer pods than machines for longer than ``startup_timeout_seconds``
deletes the Job and Service and fails the task with the API server's message
(``spot.training_job.MissingRanks``). It is not a spot capacity shortage (no other placement
changes the namespace's quota or policy), so it is not resubmitted; Airflow's retries apply, for a
quota may free up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_gpu.operators import orphaned_try, training_success
from airflow_gpu.operators.delegation import DelegatedRun, outside_the_users_dag
from airflow_gpu.operators.spot_task import bad_result, fail, publish, save_run
from airflow_gpu.operators.training_job_cluster import TrainingJobs
from airflow_gpu.operators.training_job_logs import MachineLogs
from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.training_job import (
    JobEnd,
    JobPods,
    MissingRanks,
    StuckClock,
    adoptable,
    job_end,
    node_of,
    refused,
)
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.training_job import ENV_MAIN_ADDRESS, JOB_LABEL, base_name, job_manifests, job_name

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.accelerators.accelerate import AccelerateLaunch
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
    from airflow_gpu.spot.policy import Capacity

__all__ = ["ENV_MAIN_ADDRESS", "JOB_LABEL", "IndexedJobTraining", "backend_operator", "runner"]

#: The task state store key of a training's spot run (Airflow 3.3+): what a later try reads.
STATE_STORE_KEY = "airflow_gpu_training_job"
#: The method a deferred training resumes with (``AccelerateTrainOperator.resume_execution`` routes it).
RESUME_METHOD = "resume_training_job"


def backend_operator(
    launch: AccelerateLaunch, kwargs: Mapping[str, Any], env: Mapping[str, str], *, capacity: Capacity | None
) -> GPUKubernetesOperator:
    """The ``GPUKubernetesOperator`` whose pod runs one machine of the launch."""
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    arguments = dict(kwargs)
    given = arguments.pop("env_vars", None) or {}
    if not isinstance(given, Mapping):
        raise TypeError("AccelerateTrainOperator(target='kubernetes') takes env_vars as a mapping; use env=")
    arguments["do_xcom_push"] = False  # the result line, not KPO's sidecar
    arguments.setdefault("name", arguments["task_id"])
    return GPUKubernetesOperator(
        **outside_the_users_dag(),
        cmds=launch.command('"$JOB_COMPLETION_INDEX"', f'"${ENV_MAIN_ADDRESS}"'),
        env_vars={**given, **launch.environment(), **env},
        capacity=capacity,
        **arguments,
    )


def runner(operator: GPUKubernetesOperator, launch: AccelerateLaunch, *, poll_interval: float, log: Any) -> Any:
    """What runs the launch: the operator's own pod for one machine, an Indexed Job for several."""
    if launch.num_machines == 1:
        return DelegatedRun(operator)
    return IndexedJobTraining(operator, launch, poll_interval, log)


class IndexedJobTraining:
    """One training over several machines: Jobs created, watched (here or by the triggerer), classified
    and replaced."""

    def __init__(self, operator: GPUKubernetesOperator, launch: AccelerateLaunch, poll_interval: float, log: Any):
        self.op, self.launch, self.poll_interval, self.log = operator, launch, poll_interval, log
        self.job: str | None = None
        self.namespace = "default"
        self.cluster: TrainingJobs | None = None
        self.context: Context | None = None
        self._killed = threading.Event()
        self.logs: MachineLogs | None = None  # the machines' (``training_job_logs``), once started
        self._judged = False  # this try judged its last Job (and deleted it): nothing to take over

    @property
    def machine_logs(self) -> MachineLogs:
        assert self.logs is not None, "the training has not started"
        return self.logs

    @property
    def jobs(self) -> TrainingJobs:
        assert self.cluster is not None, "the training has not started"
        return self.cluster

    def _start(self, context: Context) -> None:
        op = self.op
        self.context = context
        self.namespace = op.namespace or op.hook.get_namespace() or "default"
        self.cluster = TrainingJobs(op.client, self.namespace, self.log)
        self.logs = self.logs or MachineLogs(op.client, self.namespace, op.base_container_name, self.log)
        orphaned_try.remember(op, context)  # its supervisor: once gone, the waits stop; the Job left or deleted

    def run(self, context: Context) -> Any:
        from airflow.sdk.exceptions import TaskDeferred

        from airflow_gpu.operators.training_job_reattach import take_over

        self._start(context)
        try:
            if (mark := training_success.recorded(self, context)) is not None:  # an earlier try read it, then died
                return training_success.take_over(self, context, mark)
            self.job = take_over(self.op, self.jobs, context, self.log)
            if self.job is None:
                self._submit(context)
            return self._follow(context, deferrable=self.op.deferrable)
        except TaskDeferred:
            raise
        except BaseException as error:
            self._after_error(context, error)
            raise

    def _after_error(self, context: Context, error: BaseException) -> None:
        """An exception leaves ``execute``: the try's Job and Service go (KPO's ``cleanup()`` in a ``finally``),
        unless the next try takes the running Job over (``retry_handover``), as after a trigger's crash."""
        from airflow_gpu.operators.retry_handover import why_no_takeover
        from airflow_gpu.operators.training_job_reattach import left_orphaned

        name = self.job
        if name is None:
            return
        if orphaned_try.orphaned(self.op):
            return left_orphaned(self, context)
        why_not = "the task was killed" if self._killed.is_set() else why_no_takeover(self.op, context)
        if why_not is None and not self._judged:
            try:
                job = self.jobs.read(name)
            except Exception as read_error:  # the API is what failed: leave the Job to the retry's take-over
                self.log.warning("Training Job %s runs on for the next try to take over (%s)", name, read_error)
                return
            if job is not None and adoptable(job):
                self.log.warning("Training Job %s runs on for the next try to take over (%s)", name, error)
                return
        self.log.warning("Deleting training Job %s and its Service: %s: %s", name, type(error).__name__, error)
        try:
            self.jobs.delete(name, wait=False)
        except Exception as delete_error:  # the original error is the one to raise
            self.log.error("Could not delete training Job %s (%s); its ttlSecondsAfterFinished remains", name,
                           delete_error)  # fmt: skip
        if not self._judged:
            save_run(context, STATE_STORE_KEY, self.op.spot_run, open_=False)  # no later try takes it over

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Back from ``GPUTrainingJobTrigger``: the Job that ended the run (the trigger made any before it)."""
        from airflow.sdk import BaseOperator
        from airflow.sdk.exceptions import TaskDeferralError

        from airflow_gpu.operators.training_job_deferral import after_trigger_failure, ended_job, remove_this_try

        self._start(context)
        if next_method != RESUME_METHOD:  # __fail__: the deferral timed out (execution_timeout) or its trigger failed
            try:  # Airflow's own (the pod operator's would judge the Job's pods as its own pods)
                return BaseOperator.resume_execution(self.op, next_method, next_kwargs, context)
            except TaskDeferralError:  # the trigger crashed: the next try may take the running Job over
                after_trigger_failure(self.op, self.jobs, context, self.log)
                raise
            except BaseException:
                remove_this_try(self.op, self.jobs, context, self.log)
                raise
        event = dict((next_kwargs or {}).get("event") or {})
        self.job, end = ended_job(self.op, self.jobs, event, self.log)
        if end is not None and (main := end.pods.main()) and (line := event.get(RESULT_LINE_KEY)):
            self.machine_logs.carried(main["metadata"]["name"], str(line))  # the trigger's read at the end
        try:
            if end is None:  # the trigger could not watch (RBAC?): the worker watches from here
                self.log.warning("The triggerer could not watch training Job %s: %s", self.job, event.get("message"))
                return self._follow(context, deferrable=False)
            self.machine_logs.print_all(end.pods)
            result = self._after(context, end)
            return self._follow(context, deferrable=self.op.deferrable) if result is _RESUBMIT else result
        except BaseException as error:  # the worker died while this try watched (a broken pipe, often): as ``run``
            if orphaned_try.orphaned(self.op):
                self._after_error(context, error)
            raise

    def _follow(self, context: Context, deferrable: bool) -> Any:
        """Wait for the current Job (or defer to the triggerer) until one ends the run."""
        while True:
            if self._killed.is_set():
                raise AirflowException("the task was killed; no new training Job is created")
            if deferrable:
                from airflow_gpu.operators.training_job_deferral import defer

                defer(self, context)
            end = self._wait()
            self.machine_logs.finish(self._killed.is_set())
            result = self._after(context, end)
            if result is not _RESUBMIT:
                return result

    def _after(self, context: Context, end: JobEnd) -> Any:
        """Hand the ended Job to the spot run; return the result, submit the next Job, or fail."""
        op = self.op
        node = node_of(end.culprit)
        decision = op.spot_run.finish(end.result, workload=self.job, location=node, identity=self.job)
        main = end.pods.main()
        op._output, op._unread = self.machine_logs.main_output(main)
        publish(context, op.spot_run, node)
        op._publish_profile(context, main["metadata"]["name"] if main else self.job, node)
        # Recorded before the Job and the open run go: a retry after a crash takes the success over. One that could
        # not be (the store's request failed: the supervisor dying) keeps the Job, and the run open, for a retry.
        recorded = decision.action != "succeed" or training_success.record(self, context, node)
        if recorded:
            self.jobs.delete(self.job, grace_seconds=op.termination_grace_period or 30)
        if decision.action != "resubmit":
            self._judged = recorded  # unrecorded: an error closing the run leaves the Job (``_after_error``)
            save_run(context, STATE_STORE_KEY, op.spot_run, open_=False)  # this try judged its Job
            self._judged = True
            if not recorded:  # the store took this write after all: the Job goes as it would have
                self.jobs.delete(self.job, grace_seconds=op.termination_grace_period or 30)
        if self._killed.is_set():
            raise AirflowException("the task was killed; the training Job was deleted")
        if decision.action == "succeed":
            if end.result.message:  # a success with a word: another machine ended badly once the main one finished
                self.log.warning("Training Job %s succeeded: %s", self.job, end.result.message)
            return self._result()
        log_interruptions(self.log, op.spot_run, decision, f"{self.job} (Indexed Job of {self.launch.num_machines})")
        if decision.action != "resubmit":
            fail(op.spot_run, decision)
        self.log.info("Creating the training Job again on %s (%s capacity)", op.accelerator, op.spot_run.capacity)
        self._submit(context)
        return _RESUBMIT

    # --- the objects ----------------------------------------------------------------------

    def base(self, context: Context) -> str:
        """The name of this try's first Job: the operator's ``name`` and the try's identity."""
        ti = context["ti"]
        name = self.op.name or ti.task_id
        map_index = getattr(ti, "map_index", -1)
        stem = f"{name}-{map_index}" if map_index is not None and map_index >= 0 else name
        return base_name(stem, (ti.dag_id, ti.task_id, ti.run_id, map_index, ti.try_number))

    def _submit(self, context: Context) -> None:
        """The Service and the Indexed Job of the current placement, from ``GPUKubernetesOperator``'s pod."""
        op = self.op
        orphaned_try.stop_if_orphaned(op)  # a try that can tell Airflow nothing makes nothing more
        name = job_name(self.base(context), op.spot_run.submissions)
        manifests = job_manifests(
            to_dict(op.build_pod_request_obj(context)), name, machines=self.launch.num_machines,
            port=self.launch.main_process_port, base_container=op.base_container_name,
            active_deadline_seconds=op.active_deadline_seconds,
        )  # fmt: skip
        self.job = name
        adopted = self.jobs.create(manifests)
        op.spot_run.submitted(name)
        save_run(context, STATE_STORE_KEY, op.spot_run)  # open: a later try may take it over
        self.log.info(
            "%s Indexed Job %s/%s: %d machines of %s, rendezvous at %s-0.%s:%d", "Adopted" if adopted else "Created",
            self.namespace, name, self.launch.num_machines, op.accelerator, name, name, self.launch.main_process_port,
        )  # fmt: skip

    # --- waiting here ----------------------------------------------------------------------

    def _wait(self) -> JobEnd:
        """Until the Job ended (or a rank stayed unschedulable or unstarted past its timeout), polling."""
        name = str(self.job)
        pods = JobPods()
        startup = float(self.op.startup_timeout_seconds)
        clock = StuckClock({Outcome.UNSCHEDULABLE: self.op.spot.capacity_timeout, Outcome.INFRASTRUCTURE: startup})
        missing = MissingRanks(startup)
        while True:
            orphaned_try.stop_if_orphaned(self.op)
            job = self.jobs.read(name)  # `get jobs`, not jobs/status
            if job is not None:
                current = self.jobs.pods(name)
                pods.listed(current)
                for pod_name, pod in current.items():
                    if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                        self.machine_logs.follow(pod_name, pod)  # ended between two looks: its log is still there
            ended = job_end(job, pods, self.op.reads.node_stays, name)
            stuck: tuple[Classification, dict[str, Any] | None] | None = (
                clock.check(pods.current(), time.monotonic()) if ended is None else None
            )
            if ended is None and stuck is None and (count := missing.check(job, pods.current(), time.monotonic())):
                expected = int(((job or {}).get("spec") or {}).get("parallelism") or 0)
                refusal = refused(name, count, expected, startup, self.jobs.failed_creates(name), self.namespace)
                stuck = refusal, None
            if stuck is not None:  # the ranks that run would wait at the rendezvous: stopped now, logs read to the end
                self.jobs.delete(name, wait=False)
                ended = stuck
            if ended is not None:
                return JobEnd(ended[0], ended[1], pods)
            if self._killed.is_set():
                return JobEnd(Classification(Outcome.DELETED, "Killed", "the task was killed"), None, pods)
            time.sleep(self.poll_interval)

    def _result(self) -> Any:
        output = self.op._output
        if output is None:
            return None
        if output.result_error is not None:
            raise bad_result(output.result_error) from output.result_error
        return output.result if output.result_found else None

    def on_kill(self) -> None:
        self._killed.set()
        if self.logs is not None:
            self.logs.stop()
        if self.cluster is not None:
            self.cluster.delete(self.job, wait=False)
        if self.context is not None:
            save_run(self.context, STATE_STORE_KEY, self.op.spot_run, open_=False)  # never taken over


class _Resubmit:
    """Marker: the Job was not the last; the next one is submitted."""


_RESUBMIT = _Resubmit()

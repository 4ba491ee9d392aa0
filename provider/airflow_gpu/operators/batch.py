"""``GPUBatchOperator``: the amazon provider's ``BatchOperator`` from one accelerator spec, riding out spot.

This module only translates; the pieces live elsewhere. Each SubmitJob is built from the
rendered arguments and the run's placement (``accelerators.batch_job``), on a job definition
registered once per content (``GPUBatchHook``) whose ``retryStrategy`` lets Batch retry spot
reclaims itself. The spot run (``spot.run``) reads every attempt of the ended job and decides:
spot exhausted -> on-demand; RUNNABLE past ``capacity_timeout``, whatever reason AWS gives or not
-> cancel and, if it really did not start, the next candidate (apache/airflow#38298); a bug ->
fail without Airflow retries. The run's state is saved before waiting and the try's identity
rides in the job's tags, so a retry after a worker crash takes over that job, running or ended,
instead of submitting another (apache/airflow#72413), and then the job that try's trigger submitted
in place of a reclaimed one (a resume lost), which the saved state cannot name. Results and logs
come from the job's own ``awslogs-group``, waiting out CloudWatch's ingestion lag. ``deferrable=True`` waits in
``GPUBatchJobTrigger`` (one DescribeJobs per 100 jobs for the whole triggerer), which carries the
spot run on: the deferral and the resume are ``batch_deferral.BatchDeferral``'s. What is submitted
(the job definition, SubmitJob's arguments for a placement, the queue check) is
``batch_submission.BatchSubmission``'s: the deferral's plan is built from the same arguments, so
they live apart from both the wait here and the deferral.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

try:
    from airflow.providers.amazon.aws.operators.batch import BatchOperator
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "GPUBatchOperator needs the amazon provider: pip install 'airflow-provider-gpu[amazon]'"
    ) from error

from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_gpu.accelerators.batch import BatchPlacement, to_batch
from airflow_gpu.accelerators.batch_job import TRY_TAG
from airflow_gpu.accelerators.batch_queues import QueueOffer, check_queues
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount
from airflow_gpu.accelerators.shared_memory import SharedMemory
from airflow_gpu.accelerators.spec import Accelerator, parse_candidates
from airflow_gpu.hooks import batch_nodes
from airflow_gpu.hooks.batch import GPUBatchHook
from airflow_gpu.images.entrypoint import check_entrypoint
from airflow_gpu.images.selection import resolve_image
from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.operators import batch_success, orphaned_try, success_mark
from airflow_gpu.operators.batch_deferral import JOB_ID_XCOM_KEY, RESUBMIT, STATE_KEY, BatchDeferral
from airflow_gpu.operators.batch_submission import BatchSubmission
from airflow_gpu.operators.batch_unsaved import unsaved_first_job
from airflow_gpu.operators.gpu_profile import check_interval, profiled_by_default, publish_profile
from airflow_gpu.operators.spot_task import bad_result, fail, publish, save_run, saved_run
from airflow_gpu.spot import batch as spot_batch
from airflow_gpu.spot.batch import FINAL, CapacityClock
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.spot.run import SpotRun
from airflow_gpu.triggers.interruption_log import log_interruptions
from airflow_gpu.utils.batch_links import earlier_job, persist_log_link
from airflow_gpu.utils.batch_logs import AttemptLogs
from airflow_gpu.utils.results import WorkloadOutput, missing_result

if TYPE_CHECKING:
    from airflow.sdk import Context


class GPUBatchOperator(BatchSubmission, BatchDeferral, BatchOperator):
    """Run a container on AWS Batch GPUs described by one accelerator spec.

    :param accelerator: ``"A10G:4"``, an ``Accelerator``, or candidates in preference order.
    :param image: ``"auto"`` or a reference validated against every candidate.
    :param command: the container command (a list), templated.
    :param vcpus: vCPUs (default: the candidate's share of its smallest host).
    :param memory: MiB or a quantity such as ``"64Gi"`` (default: the share of the host's memory).
    :param shared_memory: ``/dev/shm``: ``"auto"``, ``None``, MiB or a quantity.
    :param environment: environment variables for the container, templated.
    :param job_queue: one queue (no fallback between capacity types), or
    :param job_queues: ``{"spot": "gpu-spot", "on-demand": "gpu-on-demand"}``; the task starts on
        spot when it has a spot queue.
    :param spot: the ``SpotPolicy``.
    :param job_definition: your own job definition: the spec then travels as container overrides,
        and its ``retryStrategy`` is kept.
    :param driver_version: the hosts' NVIDIA driver, to select or validate the image's CUDA.
    :param log_lag: the longest CloudWatch ingestion lag to wait out, in seconds: for the result line
        after a success (ended early once it is read), for the last lines of a failed job.
    :param gpu_profile: sample the GPUs while the job runs (default: on for NVIDIA GPUs); the
        summary, advice and cost go to XCom ``gpu_profile`` and the GPU Profile page. It wraps
        ``command`` (or the overrides' command), so it needs one and a python3 in the image. The
        profiler also polls the instance metadata service for a spot interruption notice and writes
        it to ``$AIRFLOW_GPU_SPOT_NOTICE_FILE``.
    :param profile_interval: seconds between samples (0.05 to 60).
    :param image_entrypoint: the image's ENTRYPOINT, for an image whose config the worker cannot read
        from its registry (by default it is read there: Batch keeps the ENTRYPOINT, which receives the
        command as its arguments). ``[]``: none; ``"execs-arguments"``: one that runs its arguments as
        a command (ends in ``exec "$@"``). The command is wrapped only where the ENTRYPOINT passes it on;
        otherwise the job runs unprofiled, and the profile's note says why (docs/profiling.rst).
    :param job_name: the jobs' name (default: the task id), templated; a mapped task's jobs get
        ``-m<map index>``, a replacement ``-r<N>``, so that the console tells them apart.

    Every ``BatchOperator`` argument works too. The task's return value is the JSON of the last
    ``::airflow-gpu-result::<json>`` line the job printed, else None, with a warning that says why
    (the log could not be read, or it has no such line); never the job id, which XCom
    ``batch_job_id`` holds.
    """

    template_fields: Sequence[str] = (*BatchOperator.template_fields, "command", "environment")
    aws_hook_class = GPUBatchHook
    operator_extra_links = (*BatchOperator.operator_extra_links, GPUProfileLink())  # type: ignore[assignment]

    def __init__(
        self,
        *,
        accelerator: str | Accelerator | Sequence[str | Accelerator],
        image: str = "auto",
        command: list[str] | None = None,
        vcpus: CpuAmount | None = None,
        memory: MemoryAmount | None = None,
        shared_memory: SharedMemory = "auto",
        environment: Mapping[str, str] | None = None,
        job_queue: str | None = None,
        job_queues: Mapping[str, str] | None = None,
        spot: SpotPolicy | Mapping[str, Any] | None = None,
        job_definition: str | None = None,
        job_name: str | None = None,
        driver_version: str | None = None,
        log_lag: float = 10.0,
        gpu_profile: bool | None = None,
        profile_interval: float = 1.0,
        image_entrypoint: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        self.candidates = parse_candidates(accelerator)
        self.image_entrypoint = check_entrypoint(image_entrypoint)
        self.gpu_profile = profiled_by_default(self.candidates) if gpu_profile is None else bool(gpu_profile)
        self.profile_interval = check_interval(profile_interval)
        self.queues = check_queues(job_queue, job_queues)
        self.spot = spot if isinstance(spot, SpotPolicy) else SpotPolicy(**(spot or {}))
        self.images = tuple(resolve_image(image, c, driver_version) for c in self.candidates)
        self.placements: tuple[BatchPlacement, ...] = tuple(
            to_batch(c, vcpus=vcpus, memory=memory, shared_memory=shared_memory) for c in self.candidates
        )
        self.command = list(command) if command is not None else None
        self.environment = dict(environment or {})
        self.user_job_definition = job_definition
        self.log_lag = log_lag
        kwargs.setdefault("awslogs_enabled", True)
        kwargs.setdefault("awslogs_fetch_interval", timedelta(seconds=5))
        if isinstance(kwargs["awslogs_fetch_interval"], int | float):  # seconds, as poll_interval takes them
            kwargs["awslogs_fetch_interval"] = timedelta(seconds=kwargs["awslogs_fetch_interval"])
        kwargs.setdefault("poll_interval", 10)
        self.initial_capacity = "spot" if "spot" in self.queues else ("on-demand" if self.queues else None)
        super().__init__(
            job_name=job_name or kwargs.get("task_id", "gpu-job"),
            job_definition=job_definition or "generated-at-execute",
            job_queue=job_queue or self.queues[self.initial_capacity or "spot"],
            **kwargs,
        )
        # Falling back needs somewhere to fall back to: without an on-demand queue the policy cannot.
        policy = self.spot
        if self.queues and "on-demand" not in self.queues:
            policy = policy.model_copy(update={"fallback_to_on_demand": False})
        self.spot_run = SpotRun.start(policy, self.candidates, "batch", self.initial_capacity)  # type: ignore[arg-type]
        self._offers: dict[str, QueueOffer] = {}  # queue name -> what it launches, read at execute
        self._definitions: dict[int, str] = {}  # candidate -> its registered job definition's ARN
        self._wrapper_forms: dict[int, str | None] = {}  # candidate -> SHELL if its ENTRYPOINT lets it be wrapped
        self._forms_recalled = False  # the profiler forms of earlier tries were read (``operators.profiler_forms``)
        self._profile_notes: dict[int, str] = {}  # candidate -> why its jobs are not (fully) profiled
        self._logs: AttemptLogs | None = None
        self._context: Context | None = None
        self._killing = False
        self._earlier_try: str | None = None  # the try whose run this one took over (``_earlier_job``)

    @property
    def gpu_hook(self) -> GPUBatchHook:
        """``self.hook``, typed: ``aws_hook_class`` makes it a ``GPUBatchHook``."""
        return cast(GPUBatchHook, self.hook)

    @property
    def accelerator(self) -> Accelerator:
        return self.candidates[self.spot_run.placement.candidate]

    def _earlier_job(self, context: Context) -> dict[str, Any] | None:
        saved = saved_run(context, STATE_KEY, open_only=True)
        job = earlier_job(context, saved, self.gpu_hook, self.spot_run, self.log)
        if job is None and saved is None:  # the previous try's first job, never saved (``batch_unsaved``)
            job = unsaved_first_job(self, context, (saved_run(context, STATE_KEY) or {}).get("workload"))
            if job is not None:
                self.spot_run.submitted(str(job["jobId"]))
                save_run(context, STATE_KEY, self.spot_run)
        if job is not None:
            self.job_id = job["jobId"]
            context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=self.job_id)  # this try's XCom starts empty
            made_by = str((job.get("tags") or {}).get(TRY_TAG) or "")
            self._earlier_try = made_by if made_by != str(context["ti"].try_number) else None
            if self._earlier_try is not None and job["status"] not in FINAL:  # its maker, orphaned, leaves it
                orphaned_try.mark_job_taken(self, job)
        return job

    def _ended_already(self) -> bool:
        """Whether the job followed now is one an earlier try's run left ended (the reclaimed job its lost
        resume's trigger replaced, that replacement's success): judged here, as its trigger did, not deferred
        on, so that the next job is looked for among that try's (``_submitted_already``), never submitted twice."""
        if self._earlier_try is None:
            return False
        return self.gpu_hook.describe_job(str(self.job_id), self.poll_interval)["status"] in FINAL

    # --- the loop -------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self._context = context  # for on_kill
        orphaned_try.remember(self, context)  # Airflow's task supervisor: once gone, this try stops acting
        if (mark := success_mark.recorded(context, batch_success.BACKEND)) is not None:  # read, then died
            return batch_success.take_over(self, context, mark, STATE_KEY, JOB_ID_XCOM_KEY)
        try:
            if self._earlier_job(context) is None:
                self._check_queue_offers()
                self.submit_job(context)
            while True:
                if self.deferrable and not self._ended_already():
                    self._defer(context)
                result = self._conclude(context, self._wait(context))
                if result is not RESUBMIT:
                    return result
                orphaned_try.stop_if_orphaned(self)  # a try that can tell Airflow nothing submits nothing
                self.submit_job(context)
        except (AirflowFailException, TaskDeferred):  # the job ended (or waits in the triggerer)
            raise
        except Exception as error:
            self._stop_unless_taken_over(context, error)
            raise
        finally:
            self.logs.close(settle=False)

    def _stop_unless_taken_over(self, context: Context, error: BaseException) -> None:
        """An error leaves ``execute`` (an outage longer than the retries, say) with the job maybe running:
        the next try takes it over (the saved state), but with no next try it would run on, billed and
        never read, so it is terminated. A try whose number is past ``max_tries`` is the task's last."""
        ti = context["ti"]
        if not self.job_id or self._killing:
            return
        if orphaned_try.orphaned(self):  # its supervisor died (``orphaned_try``): no log line, they fail here
            orphaned_try.stop_job(self, context, str(self.job_id))
            return
        if int(ti.try_number) <= int(getattr(ti, "max_tries", 0) or 0):
            self.log.warning("Job %s is left to the next try, which takes it over (%s)", self.job_id, error)
            return
        self.log.warning("This try is the task's last: terminating job %s (%s)", self.job_id, error)
        try:
            self.on_kill(f"{spot_batch.KILLED[0]} (the task's last try failed: {type(error).__name__})")
        except Exception:
            self.log.exception("Could not terminate job %s", self.job_id)

    def _wait(self, context: Context) -> dict[str, Any]:
        """Poll until the job ends; past ``capacity_timeout`` in RUNNABLE, cancel it (and keep following
        it if it started meanwhile). Each attempt's log is followed into the task log."""
        clock = CapacityClock(self.spot.capacity_timeout)
        job = self.gpu_hook.describe_job(str(self.job_id), self.poll_interval)
        while True:
            if self.awslogs_enabled:
                self.logs.follow(self._log_job(job))
            if job["status"] in FINAL:
                return job
            if clock.expired(job["status"], time.monotonic()):
                job = self._cancel_for_capacity(job)
                continue
            time.sleep(self.poll_interval)
            orphaned_try.stop_if_orphaned(self)
            self._stop_duplicates(context)  # a first submission listed late: one job of the try runs
            batch_nodes.stop_if_a_node_failed(self.gpu_hook, job)  # a training cannot go on without a node
            job = self.gpu_hook.describe_job(str(self.job_id), self.poll_interval)

    @property
    def logs(self) -> AttemptLogs:
        if self._logs is None:
            region, interval = self.hook.conn_region_name, self.awslogs_fetch_interval
            self._logs = AttemptLogs(self.aws_conn_id, region, interval, self.log, self.log_lag)
        return self._logs

    def _cancel_for_capacity(self, job: dict[str, Any]) -> dict[str, Any]:  # if it started meanwhile, follow it
        reason = spot_batch.capacity_cancel_reason(job, self.spot.capacity_timeout)
        return self.gpu_hook.cancel_runnable(job["jobId"], reason, self.poll_interval)

    def _conclude(self, context: Context, job: dict[str, Any]) -> Any:
        """Hand the ended job to the spot run; return the result, resubmit, or fail."""
        if self._wrapper_fallback(job):  # the image cannot start the profiler's wrapper: again, another way
            if not self.deferrable:
                self.logs.retire(self._log_job(job))
            save_run(context, STATE_KEY, self.spot_run)
            return RESUBMIT
        nodes = self._nodes(job)
        decision = self.spot_run.finish(
            spot_batch.classify_job(job, nodes),
            spot_batch.classify_attempts(job, nodes),
            workload=job["jobId"],
            location=spot_batch.queue_name(job),
            ended_at=spot_batch.attempts_ended_at(job),
        )
        logged = self._log_job(job)
        persist_log_link(context, self, self.gpu_hook, logged)
        if decision.action == "succeed":
            try:
                result = self._result(context, logged)
            except AirflowFailException:  # a result line that is not JSON ends this try too; any other
                save_run(context, STATE_KEY, self.spot_run, open_=False)  # error leaves the job to a retry
                raise
            batch_success.record(self, context, job, result)
            save_run(context, STATE_KEY, self.spot_run, open_=False)
            publish(context, self.spot_run, spot_batch.queue_name(job))
            return result
        if self.gpu_profile:  # a failed or reclaimed job's profile too: an out-of-memory shows there
            output = self.gpu_hook.read_output(logged, self.log_lag, result=False, profile=self._wrapped)
            self._publish_profile(context, logged, output)
        log_interruptions(self.log, self.spot_run, decision, job["jobId"])
        publish(context, self.spot_run, spot_batch.queue_name(job))
        if decision.action != "resubmit":
            self._flush_logs(logged, settle=True)  # the traceback, say, may still be on its way
            save_run(context, STATE_KEY, self.spot_run, open_=False)
            fail(self.spot_run, decision)
        if self._killing:  # on_kill meanwhile: nothing more is submitted
            raise AirflowException(f"the task was killed; job {job['jobId']} is not replaced")
        if not self.deferrable:  # a deferred task prints them once the next job is submitted
            self.logs.retire(logged)
        save_run(context, STATE_KEY, self.spot_run)
        return RESUBMIT

    def _log_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """The job whose attempts hold the log streams: the job itself (a multi-node job's main node)."""
        return job

    def _nodes(self, job: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        """A failed multi-node job's nodes (none for any other job): one that lost its host makes the main node's
        failure an interruption, resubmitted as a reclaim is (``spot_batch.lost_node``). Unreadable, the failure
        is the workload's."""
        if not (ids := spot_batch.child_node_ids(job)):
            return None
        try:
            return self.gpu_hook.describe_jobs_batched(ids)
        except Exception as error:  # throttled past the retries, or the API down
            self.log.warning("Could not read the nodes of job %s (%s)", job["jobId"], error)
            return None

    def _result(self, context: Context, job: dict[str, Any]) -> Any:
        """The last result line of the successful attempt (waiting out ingestion lag), else None with a
        warning saying why; the job's GPU profile goes to XCom on the way."""
        if not (self.do_xcom_push or self.gpu_profile):
            self._flush_logs(job, settle=True)
            return None
        try:
            output = self.gpu_hook.read_output(job, self.log_lag, result=self.do_xcom_push, profile=self._wrapped)
        finally:  # the lag is waited out: what was wanted is read, or log_lag has passed
            self._flush_logs(job, settle=False)
        if self.gpu_profile:
            self._publish_profile(context, job, output)
        if not self.do_xcom_push:
            return None
        if output.result_error is not None:
            raise bad_result(output.result_error) from output.result_error
        if not output.result_found:  # never the job id in its place: XCom batch_job_id holds that
            lag = f" readable within log_lag={self.log_lag:g}s (raise log_lag if it prints one: CloudWatch lags)"
            self.log.warning("%s", missing_result(f"AWS Batch job {job['jobId']}", output.unread, lag))
            return None
        return output.result

    def _publish_profile(self, context: Context, job: dict[str, Any], output: WorkloadOutput) -> None:
        if not self._wrapped:
            unread: str | None = self._profile_notes.get(
                self.spot_run.placement.candidate, "its command did not run under the profiler (see the warning above)"
            )
        elif not self.gpu_hook.attempt_streams(job):
            unread = "the job never started, or has no log stream"
        else:
            unread = None
        publish_profile(
            context, output if unread is None else None, run=self.spot_run, accelerator=self.accelerator,
            workload=job["jobId"], instance_type=None, log=self.log, unread=unread,
        )  # fmt: skip

    def on_kill(self, reason: str = spot_batch.KILLED[0]) -> None:
        """Mark Failed, or ``execution_timeout``: the job must not run on, billed. Terminated first; its
        reason keeps later tries from taking it over even if closing the saved state fails."""
        self._killing = True
        if self.job_id:
            self.gpu_hook.terminate(str(self.job_id), reason)  # through throttles and 5xx: it must stop
            self.log.info("Terminated AWS Batch job %s: %s", self.job_id, reason)
        if self._context is not None:
            save_run(self._context, STATE_KEY, self.spot_run, open_=False)

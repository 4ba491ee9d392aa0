"""``GPUBatchOperator``: the amazon provider's ``BatchOperator`` from one accelerator spec, riding out spot.

What it adds to ``BatchOperator``, and where each piece lives:

* the job definition (image, command, GPU/vCPU/memory requirements, ``/dev/shm``, Neuron
  devices) comes from the spec (``airflow_gpu.accelerators.batch``) and is registered only when
  its content changed (``GPUBatchHook.register_job_definition_once``); its ``retryStrategy`` lets
  Batch retry spot reclaims itself, up to the policy's budget (``airflow_gpu.spot.batch``);
* every attempt of the finished job is read with the shared outcomes and the ``SpotPolicy``
  decides (``airflow_gpu.spot.policy``): spot exhausted -> the on-demand queue, RUNNABLE without
  capacity past ``capacity_timeout`` -> cancel and the next candidate, then on-demand (the pain of
  apache/airflow#38298), a bug -> fail without burning Airflow retries;
* the job id is recorded before waiting, with the task try's identity in the job's tags, so a
  retry after a worker crash follows the job still running instead of submitting a second one
  (apache/airflow#72413, #19218); ``on_kill`` terminates it;
* ``deferrable=True`` waits in ``GPUBatchJobTrigger``, which polls DescribeJobs for up to 100 jobs
  per call across all deferred tasks of the triggerer.

Submitting, links and the CloudWatch log fetcher are ``BatchOperator``'s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, cast

try:
    from airflow.providers.amazon.aws.operators.batch import BatchOperator
    from airflow.providers.amazon.aws.utils.task_log_fetcher import AwsTaskLogFetcher
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "GPUBatchOperator needs the amazon provider: pip install 'airflow-provider-gpu[amazon]'"
    ) from error

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu.accelerators.batch import BatchPlacement, to_batch
from airflow_gpu.accelerators.errors import AcceleratorSpecError
from airflow_gpu.accelerators.quantities import CpuAmount, MemoryAmount
from airflow_gpu.accelerators.shared_memory import SharedMemory
from airflow_gpu.accelerators.spec import Accelerator, parse_candidates
from airflow_gpu.hooks.batch import GPUBatchHook, QueueOffer
from airflow_gpu.images.selection import resolve_image
from airflow_gpu.spot.batch import classify_attempt, classify_job, retry_strategy
from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.spot.policy import Placement, SpotPolicy, next_step
from airflow_gpu.utils.results import ACCELERATOR_XCOM_KEY, INTERRUPTIONS_XCOM_KEY, ResultError, last_result

if TYPE_CHECKING:
    from airflow.sdk import Context

CAPACITY_QUEUES = ("spot", "on-demand")
JOB_ID_XCOM_KEY = "batch_job_id"
#: Where the job id and the resubmission state are recorded before waiting (Airflow 3.3+).
STATE_KEY = "airflow_gpu_batch_job"
#: Job tags that carry the task try's identity, checked before a retry reattaches.
IDENTITY_TAGS = ("airflow-gpu/dag", "airflow-gpu/task", "airflow-gpu/run", "airflow-gpu/map-index")
TRY_TAG = "airflow-gpu/try"
ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")


def _name(*parts: str) -> str:
    """A Batch name: letters, digits, hyphens and underscores, at most 128 characters."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "--".join(parts))[:128]


class GPUBatchOperator(BatchOperator):
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

    Every ``BatchOperator`` argument works too. The task's return value is the JSON of the last
    ``::airflow-gpu-result::<json>`` line the job printed, else the job id (XCom ``batch_job_id``
    always holds the job id).
    """

    template_fields: Sequence[str] = (*BatchOperator.template_fields, "command", "environment")

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
        **kwargs: Any,
    ) -> None:
        self.candidates = parse_candidates(accelerator)
        self.queues = self._check_queues(job_queue, job_queues)
        self.spot = spot if isinstance(spot, SpotPolicy) else SpotPolicy(**(spot or {}))
        self.images = tuple(resolve_image(image, c, driver_version) for c in self.candidates)
        self.placements: tuple[BatchPlacement, ...] = tuple(
            to_batch(c, vcpus=vcpus, memory=memory, shared_memory=shared_memory) for c in self.candidates
        )
        self.command = list(command) if command is not None else None
        self.environment = dict(environment or {})
        self.user_job_definition = job_definition
        kwargs.setdefault("awslogs_enabled", True)
        kwargs.setdefault("awslogs_fetch_interval", timedelta(seconds=5))
        if isinstance(kwargs["awslogs_fetch_interval"], int | float):  # seconds, as poll_interval takes them
            kwargs["awslogs_fetch_interval"] = timedelta(seconds=kwargs["awslogs_fetch_interval"])
        kwargs.setdefault("poll_interval", 10)
        self.initial_capacity = "spot" if "spot" in self.queues else ("on-demand" if self.queues else None)
        self.base_job_name = job_name or kwargs.get("task_id", "gpu-job")  # every submission's name, + map index
        super().__init__(
            job_name=self.base_job_name,
            job_definition=job_definition or "generated-at-execute",
            job_queue=job_queue or self.queues[self.initial_capacity or "spot"],
            **kwargs,
        )
        self._placement = Placement(0, self.initial_capacity)  # type: ignore[arg-type]
        self._submissions = 0
        self._interruptions_on_capacity = 0
        self.interruptions: list[dict[str, Any]] = []
        self._seen_attempts: set[str] = set()
        self._offers: dict[str, QueueOffer] = {}  # queue name -> what it launches, read at execute

    @staticmethod
    def _check_queues(job_queue: str | None, job_queues: Mapping[str, str] | None) -> dict[str, str]:
        if job_queue and job_queues:
            raise AcceleratorSpecError(
                "job_queues", dict(job_queues), "give job_queue or job_queues, not both", ["job_queue='gpu-spot'"]
            )
        if job_queues is None:
            if not job_queue:
                raise AcceleratorSpecError("job_queue", job_queue, "a job queue is required", ["'gpu-spot'"])
            return {}
        unknown = set(job_queues) - set(CAPACITY_QUEUES)
        if unknown or not job_queues:
            raise AcceleratorSpecError(
                "job_queues", dict(job_queues), "keys are capacity types", ["{'spot': ..., 'on-demand': ...}"]
            )
        return dict(job_queues)

    aws_hook_class = GPUBatchHook

    @property
    def gpu_hook(self) -> GPUBatchHook:
        """``self.hook``, typed: ``aws_hook_class`` makes it a ``GPUBatchHook``."""
        return cast(GPUBatchHook, self.hook)

    @property
    def accelerator(self) -> Accelerator:
        return self.candidates[self._placement.candidate]

    def _queue_for(self, placement: Placement) -> str:
        if not self.queues:
            return str(self.job_queue)
        return self.queues[placement.capacity or self.initial_capacity or "spot"]

    def _placement_offered(self, placement: Placement) -> Placement:
        """Each candidate goes to a queue whose compute environments launch it.

        When the queue of the placement's capacity cannot launch the candidate, the other
        capacity's queue is used if it can (a GPU only on on-demand capacity), else the next
        candidate that some queue offers. Without queue information the placement stands.
        """
        offers = self._offers
        if not offers:
            return placement
        order = [placement.capacity, *(c for c in CAPACITY_QUEUES if c != placement.capacity)]
        for candidate in range(placement.candidate, len(self.candidates)):
            for capacity in order if self.queues else [placement.capacity]:
                if self.queues and capacity not in self.queues:
                    continue
                queue = offers.get(self._queue_for(Placement(candidate, capacity)))  # type: ignore[arg-type]
                if queue is not None and queue.can_run(self.candidates[candidate]):
                    chosen = Placement(candidate, capacity)  # type: ignore[arg-type]
                    if chosen != placement:
                        self.log.warning(
                            "%s on %s capacity is not offered by its queue; using %s on %s",
                            self.candidates[placement.candidate], placement.capacity,
                            self.candidates[candidate], capacity,
                        )  # fmt: skip
                    return chosen
        return placement

    # --- the job --------------------------------------------------------------------------

    def _definition(self, context: Context) -> str:
        """The job definition ARN for the current candidate: the user's, or ours registered once."""
        if self.user_job_definition:
            return self.user_job_definition
        i = self._placement.candidate
        placement = self.placements[i]
        container: dict[str, Any] = {
            "image": self.images[i],
            "resourceRequirements": placement.resource_requirements,
            "linuxParameters": placement.linux_parameters,
        }
        if self.command:
            container["command"] = self.command
        definition = {
            "type": "container",
            "containerProperties": container,
            "retryStrategy": retry_strategy(self.spot),
            "propagateTags": True,
            "tags": {"airflow-gpu/accelerator": str(self.candidates[i])},
        }
        name = _name(context["ti"].dag_id, self.task_id, self.candidates[i].type)
        return self.gpu_hook.register_job_definition_once(name, definition)

    def _overrides(self) -> dict[str, Any]:
        env = {
            **self.environment,
            "AIRFLOW_GPU_ACCELERATOR": str(self.accelerator),
            "AIRFLOW_GPU_CAPACITY": self._placement.capacity or "any",
            "AIRFLOW_GPU_ATTEMPT": str(self._submissions + 1),
            "AIRFLOW_GPU_INTERRUPTIONS": str(len(self.interruptions)),
        }
        overrides: dict[str, Any] = dict(self.container_overrides or {})
        overrides["environment"] = [
            *(overrides.get("environment") or []),
            *({"name": k, "value": str(v)} for k, v in env.items()),
        ]
        if self.user_job_definition:  # the spec rides on the user's definition as overrides
            overrides.setdefault(
                "resourceRequirements", self.placements[self._placement.candidate].resource_requirements
            )
            if self.command:
                overrides.setdefault("command", self.command)
        return overrides

    def _identity(self, context: Context) -> dict[str, str]:
        ti = context["ti"]
        return {
            "airflow-gpu/dag": ti.dag_id,
            "airflow-gpu/task": ti.task_id,
            "airflow-gpu/run": str(ti.run_id)[:256],
            "airflow-gpu/map-index": str(getattr(ti, "map_index", -1)),
            TRY_TAG: str(ti.try_number),
        }

    def submit_job(self, context: Context) -> None:
        """``BatchOperator.submit_job`` with our definition, overrides, queue, name and identity tags."""
        self._placement = self._placement_offered(self._placement)
        self.job_definition = self._definition(context)
        self.job_queue = self._queue_for(self._placement)
        self.container_overrides = self._overrides()
        self.tags = {**(self.tags or {}), **self._identity(context)}
        map_index = getattr(context["ti"], "map_index", -1)
        mapped = map_index is not None and map_index >= 0
        self.job_name = _name(f"{self.base_job_name}-m{map_index}" if mapped else self.base_job_name)
        super().submit_job(context)
        self._record(context)

    # --- state that outlives this process -------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "candidate": self._placement.candidate,
            "capacity": self._placement.capacity,
            "submissions": self._submissions,
            "interruptions_on_capacity": self._interruptions_on_capacity,
            "interruptions": self.interruptions,
            "seen_attempts": sorted(self._seen_attempts),
        }

    def _restore(self, state: Mapping[str, Any]) -> None:
        candidate = int(state.get("candidate", 0))
        if 0 <= candidate < len(self.candidates):
            self._placement = Placement(candidate, state.get("capacity"))
        self._submissions = int(state.get("submissions", 0))
        self._interruptions_on_capacity = int(state.get("interruptions_on_capacity", 0))
        self.interruptions = list(state.get("interruptions", []))
        self._seen_attempts = set(state.get("seen_attempts", []))
        self.job_id = state.get("job_id")

    def _record(self, context: Context) -> None:
        """The job id (and state) before any waiting: the XCom for people, the state store for retries."""
        context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=self.job_id)
        store = context.get("task_state_store")
        if store is not None:
            store.set(STATE_KEY, self._state())

    def _job_to_reattach(self, context: Context) -> dict[str, Any] | None:
        """A job an earlier try of this task started and Batch still runs, if any."""
        store = context.get("task_state_store")
        saved = store.get(STATE_KEY) if store is not None else None
        if not isinstance(saved, dict) or not saved.get("job_id"):
            return None
        job_id = str(saved["job_id"])
        job = self.gpu_hook.describe_jobs_batched([job_id]).get(job_id)
        if job is None or job["status"] not in ACTIVE:
            return None
        tags = job.get("tags") or {}
        identity = self._identity(context)
        mismatch = [k for k in IDENTITY_TAGS if tags.get(k) != identity[k]]
        job_try = tags.get(TRY_TAG, "0")
        if mismatch or not job_try.isdigit() or int(job_try) > context["ti"].try_number:
            self.log.warning("Not reattaching to job %s: its tags %s are not this task try's", job["jobId"], tags)
            return None
        self._restore(saved)
        return job

    # --- the loop -------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        reattached = self._job_to_reattach(context)
        if reattached is not None:
            self.log.info("Reattached to AWS Batch job %s (%s) of an earlier try", self.job_id, reattached["status"])
            self._record(context)  # this try's XCom starts empty
        else:
            self._check_queue_offers()
            self.submit_job(context)
        if self.deferrable:
            self._defer(context)
        return self._follow(context)

    def _follow(self, context: Context) -> Any:
        while True:
            job, capacity_reason = self._wait(context)
            outcome = self._classify(job, capacity_reason)
            result = self._after(context, job, outcome)
            if result is not _RESUBMITTED:
                return result
            self.submit_job(context)
            if self.deferrable:
                self._defer(context)

    def _classify(self, job: dict[str, Any], capacity_reason: str | None) -> Classification:
        if capacity_reason is not None:
            return Classification(Outcome.UNSCHEDULABLE, capacity_reason.split(" ", 1)[0], capacity_reason)
        return classify_job(job)

    def _wait(self, context: Context) -> tuple[dict[str, Any], str | None]:
        """Poll until the job ends or sits RUNNABLE without capacity too long; follow each attempt's log."""
        assert self.job_id is not None
        runnable_since: float | None = None
        fetcher: AwsTaskLogFetcher | None = None
        followed: str | None = None
        try:
            while True:
                job = self.gpu_hook.describe_jobs_batched([self.job_id])[self.job_id]
                stream = (job.get("container") or {}).get("logStreamName")
                if self.awslogs_enabled and stream and stream != followed and job["status"] != "RUNNABLE":
                    if fetcher is not None:
                        fetcher.stop()
                        fetcher.join()
                    fetcher, followed = self._log_fetcher(stream), stream
                    fetcher.start()
                if job["status"] in ("SUCCEEDED", "FAILED"):
                    return job, None
                if classify_job(job).outcome is Outcome.UNSCHEDULABLE:
                    runnable_since = runnable_since or time.monotonic()
                    if time.monotonic() - runnable_since > self.spot.capacity_timeout:
                        return self._cancel_for_capacity(job)
                else:
                    runnable_since = None
                time.sleep(self.poll_interval)
        finally:
            if fetcher is not None:
                fetcher.stop()
                fetcher.join()

    def _log_fetcher(self, stream: str) -> AwsTaskLogFetcher:
        return AwsTaskLogFetcher(
            aws_conn_id=self.aws_conn_id,
            region_name=self.hook.conn_region_name,
            log_group="/aws/batch/job",
            log_stream_name=stream,
            fetch_interval=self.awslogs_fetch_interval,
            logger=self.log,
        )

    def _cancel_for_capacity(self, job: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Never leave a job waiting in RUNNABLE to start later next to its replacement."""
        reason = str(job.get("statusReason") or "no capacity")
        self.log.warning("Job %s RUNNABLE past capacity_timeout (%s); cancelling it", job["jobId"], reason)
        self.gpu_hook.api.cancel_job(jobId=job["jobId"], reason=f"airflow-gpu: no capacity ({reason})"[:1024])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            current = self.gpu_hook.describe_jobs_batched([job["jobId"]])[job["jobId"]]
            if current["status"] in ("SUCCEEDED", "FAILED"):
                return current, reason
            time.sleep(min(self.poll_interval, 2))
        raise AirflowException(f"job {job['jobId']} did not stop after CancelJob")

    def _after(self, context: Context, job: dict[str, Any], outcome: Classification) -> Any:
        """Record the job's interruptions, then succeed, resubmit or fail as the policy says."""
        reclaimed_here = self._record_attempts(job)
        if outcome.outcome is Outcome.SUCCEEDED:
            self._publish(context)
            return self._result(job)
        before = self._interruptions_on_capacity + max(reclaimed_here - 1, 0)
        # Falling back needs somewhere to fall back to: without an on-demand queue the policy cannot.
        policy = self.spot
        if self.queues and "on-demand" not in self.queues:
            policy = policy.model_copy(update={"fallback_to_on_demand": False})
        decision = next_step(
            policy,
            outcome,
            self._placement,
            before,
            len(self.candidates),
            self.initial_capacity,  # type: ignore[arg-type]
        )
        self.log.warning("Job %s ended %s: %s", job["jobId"], outcome.outcome.value, decision.message)
        if self.interruptions:
            self.interruptions = [*self.interruptions[:-1], {**self.interruptions[-1], "next": decision.message}]
        self._publish(context)
        if decision.action != "resubmit":
            history = "".join(
                f"\n  - {i['time']} job {i['job']} on {i['accelerator']}/{i['capacity']}: {i['reason']}"
                for i in self.interruptions
            )
            message = decision.message + (f"\nInterruptions:{history}" if history else "")
            if decision.retry_allowed:
                raise AirflowException(message)
            raise AirflowFailException(message)
        if decision.placement.capacity != self._placement.capacity:
            self._interruptions_on_capacity = 0
        elif decision.counts_as_interruption:
            self._interruptions_on_capacity = before + 1
        self._placement = decision.placement
        self._submissions += 1
        self.log.info("Submitting a new job on %s (%s)", self.accelerator, self._queue_for(self._placement))
        return _RESUBMITTED

    def _record_attempts(self, job: dict[str, Any]) -> int:
        """Each reclaimed attempt once, as an interruption; returns how many this job had."""
        reclaimed = 0
        for number, attempt in enumerate(job.get("attempts") or [], start=1):
            classification = classify_attempt(attempt)
            if not classification.interrupted:
                continue
            reclaimed += 1
            key = f"{job['jobId']}#{number}"
            if key in self._seen_attempts:
                continue
            self._seen_attempts.add(key)
            self.interruptions = [
                *self.interruptions,
                {
                    "time": datetime.now(timezone.utc).isoformat(),
                    "job": job["jobId"],
                    "attempt": number,
                    "accelerator": str(self.accelerator),
                    "capacity": self._placement.capacity or "any",
                    "queue": self._queue_for(self._placement),
                    "outcome": classification.outcome.value,
                    "reason": classification.reason,
                    "message": classification.message,
                    "exit_code": classification.exit_code,
                },
            ]
            self.log.warning("GPU interruption %d: %s", len(self.interruptions), classification.message)
        return reclaimed

    def _result(self, job: dict[str, Any]) -> Any:
        """The last ``::airflow-gpu-result::`` line of the successful attempt, else the job id."""
        stream = (job.get("container") or {}).get("logStreamName")
        if stream:
            from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook

            logs = AwsLogsHook(aws_conn_id=self.aws_conn_id, region_name=self.hook.conn_region_name)
            try:
                found, value = last_result(str(e["message"]) for e in logs.get_log_events("/aws/batch/job", stream))
            except ResultError as error:  # a bug in the workload: retrying will not fix it
                raise AirflowFailException(str(error)) from error
            if found:
                return value
        return self.job_id

    def _publish(self, context: Context) -> None:
        ti = context["ti"]
        ti.xcom_push(key=INTERRUPTIONS_XCOM_KEY, value=list(self.interruptions))
        ti.xcom_push(
            key=ACCELERATOR_XCOM_KEY,
            value={
                "accelerator": str(self.accelerator),
                "capacity": self._placement.capacity or "any",
                "queue": self._queue_for(self._placement),
            },
        )
        store = context.get("task_state_store")
        if store is not None:
            store.set(STATE_KEY, self._state())

    def _check_queue_offers(self) -> None:
        """Skip candidates no queue can launch, and fail at once if none can: never RUNNABLE forever."""
        queues = sorted(set(self.queues.values()) or {str(self.job_queue)})
        try:
            offers = [self.gpu_hook.queue_offers(q) for q in queues]
        except Exception as error:  # a queue we may not describe is not a reason to refuse the job
            self.log.warning("Could not read the queues' instance types (%s); submitting as asked", error)
            return
        self._offers = {o.name: o for o in offers}
        runnable = [i for i, c in enumerate(self.candidates) if any(o.can_run(c) for o in offers)]
        if not runnable:
            wanted = ", ".join(str(c) for c in self.candidates)
            raise AirflowFailException(f"no queue can launch {wanted}: " + "; ".join(o.describe() for o in offers))
        if runnable[0] != self._placement.candidate:
            self.log.warning("Skipping %s: no queue offers it", self.accelerator)
            self._placement = Placement(runnable[0], self._placement.capacity)
        spec = self.accelerator
        for offer in offers:  # Batch, not the job, picks the instance type among the queue's
            others = sorted(
                {o.accelerator for o in offer.offers if o.accelerator != spec.type}
                & {o.accelerator for o in offer.offers if o.instance_type.accelerators >= spec.count}
            )
            if others:
                self.log.warning(
                    "%s: a job asking for %d GPUs may land on %s instead of %s; give %s a queue of its own to be sure",
                    offer.describe(), spec.count, ", ".join(others), spec.type, spec.type,
                )  # fmt: skip

    # --- deferrable -----------------------------------------------------------------------

    def _defer(self, context: Context) -> None:
        from airflow_gpu.triggers.batch import GPUBatchJobTrigger

        self._record(context)
        self.defer(
            trigger=GPUBatchJobTrigger(
                job_id=str(self.job_id),
                aws_conn_id=self.aws_conn_id,
                region_name=self.hook.conn_region_name,
                poll_interval=self.poll_interval,
                capacity_timeout=self.spot.capacity_timeout,
            ),
            method_name="resume_after_trigger",
            kwargs={"gpu_state": self._state()},
        )

    def resume_after_trigger(
        self, context: Context, event: dict[str, Any] | None = None, gpu_state: dict[str, Any] | None = None
    ) -> Any:
        """Back from the trigger: print the attempts' logs, then decide as the synchronous path does."""
        store = context.get("task_state_store")
        saved = gpu_state if gpu_state is not None else (store.get(STATE_KEY) if store is not None else None)
        if isinstance(saved, dict):  # ``dag.test()`` resumes with the event only; the store has the state
            self._restore(saved)
        event = event or {}
        self.job_id = event.get("job_id") or self.job_id
        if event.get("status") == "error":
            raise AirflowException(f"waiting for job {self.job_id} failed: {event.get('message')}")
        assert self.job_id is not None
        job = self.gpu_hook.describe_jobs_batched([self.job_id])[self.job_id]
        capacity_reason = None
        if event.get("status") == "capacity_timeout":
            job, capacity_reason = self._cancel_for_capacity(job)
        elif self.awslogs_enabled:
            for attempt in job.get("attempts") or []:
                stream = (attempt.get("container") or {}).get("logStreamName")
                if stream:
                    fetcher = self._log_fetcher(stream)
                    fetcher.start()
                    fetcher.stop()
                    fetcher.join()
        result = self._after(context, job, self._classify(job, capacity_reason))
        if result is not _RESUBMITTED:
            return result
        self.submit_job(context)
        self._defer(context)
        return None


class _Resubmitted:
    """Marker: the job was resubmitted, keep going."""


_RESUBMITTED = _Resubmitted()

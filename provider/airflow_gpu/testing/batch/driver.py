"""The driver: what AWS Batch's scheduler, ECS agent and Docker do to a job, over real time.

Each tick it moves every job one step: SUBMITTED -> RUNNABLE (or PENDING behind dependencies)
-> STARTING once a compute environment of the job's queue can host it (``placement.py``) ->
RUNNING with the container's argv as a local process (the image's ENTRYPOINT + the command, or its
Cmd, as Docker runs them: ``testing.images``; own process group, the Batch environment variables;
a program the image lacks fails the start with Docker's ``CannotStartContainerError``) -> SUCCEEDED
or FAILED, with each attempt in ``attempts[]`` as AWS reports it and the output in CloudWatch Logs
(``logs.py``: the job definition's log configuration, after the ingestion delay). A failed
attempt goes through the job's ``retryStrategy`` (``retry.py``). Termination and spot reclaims
send SIGTERM, then SIGKILL after ``stop_timeout`` seconds, as ECS does. After each tick only the
head of each queue shows why it is stuck, and the queue's ``jobStateTimeLimitActions`` cancel a
head stuck too long (``queues.py``). A multi-node parallel job is stepped by ``gang.py``; each of
its nodes runs here like any container job, but leaves its
retries and its ending to its job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from moto.batch.models import BatchBackend

import airflow_gpu.testing.batch.gang as gang
import airflow_gpu.testing.batch.queues as queues
from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing import gpus
from airflow_gpu.testing.batch.jobs import EmulatedJob
from airflow_gpu.testing.batch.logs import LogGroupMissing, LogShipper, LogTarget, millis, open_target
from airflow_gpu.testing.batch.nodes import MultiNodeJob
from airflow_gpu.testing.batch.placement import place
from airflow_gpu.testing.batch.reasons import INSUFFICIENT_CAPACITY, Blocked, canceled_by_time_limit
from airflow_gpu.testing.batch.retry import action_after_attempt
from airflow_gpu.testing.containers import kill_container
from airflow_gpu.testing.gpus import with_devices
from airflow_gpu.testing.images import ImageSet, pull_error

#: What ECS accepts in a task's container overrides (Batch passes the job's on): a longer command
#: or environment is accepted by SubmitJob and fails the job when it would start.
MAX_OVERRIDES_CHARS = 8192

ESSENTIAL_EXITED = "Essential container in task exited"
FAILED_TO_START = "Task failed to start"  # the job's statusReason; the attempt's container.reason says why


def reclaim_reason(instance_id: str | None) -> str:
    return f"Host EC2 (instance {instance_id}) terminated."


class BatchDriver(threading.Thread):
    """Runs the jobs of one moto Batch backend; ``offers`` says what each compute environment launches.

    ``capacity_reasons`` False is a service role without the permissions Batch needs to see
    capacity errors: a job stuck for capacity then shows no reason at all.
    """

    def __init__(
        self,
        backend: BatchBackend,
        logs_backend: Any,
        offers: dict[str, tuple[InstanceOffer, ...]],
        stop_timeout: float = 30.0,
        tick: float = 0.05,
        step_delay: float = 0.2,
        log_ingestion_delay: float = 0.0,
        max_vcpus: Mapping[str, int] | None = None,
        capacity_reasons: bool = True,
        cancel_at_head: bool = False,
        images: ImageSet | None = None,
    ) -> None:
        super().__init__(daemon=True, name="batch-emulator-driver")
        self.images = images or ImageSet()
        self.cancel_at_head = cancel_at_head  # a RUNNABLE job's CancelJob waits for it to head its queue
        setattr(backend, "emulator_cancel_at_head", cancel_at_head)  # noqa: B010 - read by the patched CancelJob (``patches.py``)
        self.backend, self.logs, self.offers = backend, logs_backend, offers
        self.stop_timeout, self.tick, self.step_delay = stop_timeout, tick, step_delay
        self.max_vcpus = dict(max_vcpus or {})
        self.capacity_reasons = capacity_reasons
        self.stalled: dict[str, str | None] = {}  # compute environment -> blocked-reason code (None: unseen)
        self.shipper = LogShipper(logs_backend, log_ingestion_delay)
        self._stopping = threading.Event()
        self.workdir = tempfile.mkdtemp(prefix="batch-emulator-")

    # --- loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self.shipper.start()
        super().start()

    def run(self) -> None:
        while not self._stopping.is_set():
            jobs = [j for j in list(self.backend._jobs.values()) if isinstance(j, EmulatedJob) and not j.finished]
            for job in jobs:
                try:
                    self.step(job)
                except Exception as error:  # one broken job must not stop the others
                    self._finish(job, "FAILED", f"emulator error: {error}")
            self._update_heads(jobs, time.monotonic())
            self._stopping.wait(self.tick)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
        try:
            for job in list(self.backend._jobs.values()):
                if isinstance(job, EmulatedJob) and job.process is not None and job.process.poll() is None:
                    self._signal(job, signal.SIGKILL)
                    job.process.wait(timeout=10)
            self.shipper.stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def step(self, job: EmulatedJob) -> None:
        now = time.monotonic()
        if not job.submitted_at:
            job.submitted_at = now
        if isinstance(job, MultiNodeJob):
            gang.step(self, job, now)
        elif job._child_jobs:
            self._step_array_parent(job)
        elif job.status in ("SUBMITTED", "PENDING"):
            self._step_submitted(job, now)
        elif job.status == "RUNNABLE":
            self._step_runnable(job)
        elif job.status == "STARTING":
            self._start(job)
        elif job.status == "RUNNING":
            self._step_running(job, now)

    def capacity_types(self) -> dict[str, str]:
        """Compute environment name -> ``computeResources.type`` (``EC2``, ``SPOT``), as the API holds it."""
        return {
            ce.name: str((ce.compute_resources or {}).get("type", ""))
            for ce in list(self.backend._compute_environments.values())
        }

    # --- states ---------------------------------------------------------------------------

    def _step_submitted(self, job: EmulatedJob, now: float) -> None:
        if job.termination is not None:
            self._finish(job, "FAILED", job.termination)
            return
        dependencies = [self.backend._jobs.get(d["jobId"]) for d in job.depends_on or []]
        if any(d is not None and d.status == "FAILED" for d in dependencies):
            self._finish(job, "FAILED", "Dependent Job failed")
        elif any(d is not None and d.status != "SUCCEEDED" for d in dependencies):
            job.status = "PENDING"
        elif now - job.submitted_at >= self.step_delay:
            job.status = "RUNNABLE"

    def _step_array_parent(self, job: EmulatedJob) -> None:
        """A cancelled parent cancels its children (the started ones run on); a terminated one terminates them."""
        children = [c for c in job._child_jobs or [] if isinstance(c, EmulatedJob)]
        if job.termination is not None:
            for child in children:
                if job.cancelled:
                    child.cancel(job.termination, at_head=self.cancel_at_head)
                else:
                    child.terminate(job.termination)
        if job.status == "SUBMITTED":
            job.status = "PENDING"
        if all(c.status in ("SUCCEEDED", "FAILED") for c in children):
            failed = [c for c in children if c.status == "FAILED"]
            self._finish(job, "FAILED" if failed else "SUCCEEDED", job.termination or None)

    def _step_runnable(self, job: EmulatedJob) -> None:
        placement = place(job, self.offers, self.max_vcpus, self.stalled)
        with job.lock:  # a CancelJob either lands before this or finds the job STARTING
            job.take_cancel()
            if job.termination is not None:
                self._finish(job, "FAILED", job.termination)
                return
            if isinstance(placement, Blocked):
                job.blocked = placement
                return
            job.blocked = None
            job.compute_environment, offer = placement
            job.instance_type, job.offer = offer.instance_type.name, offer
            job.instance_id = f"i-{uuid.uuid4().hex[:17]}"
            job.job_stopped_reason = None
            job.status = "STARTING"

    def _update_heads(self, jobs: list[EmulatedJob], now: float) -> None:
        """Only each queue's head shows its blocked reason; a head stuck past its queue's time limit is cancelled."""
        heads = queues.heads(jobs)
        for job in jobs:
            if job.status != "RUNNABLE" or job.finished or job._child_jobs:
                continue
            job.at_head = heads.get(job.job_queue.arn) is job
            shown = job.blocked if job.at_head else None
            if shown is not None and shown.code == INSUFFICIENT_CAPACITY and not self.capacity_reasons:
                shown = None
            code = shown.code if shown is not None else None
            if code != job.head_code:
                job.head_code, job.head_since = code, now
            with job.lock:
                if job.status != "RUNNABLE" or job.finished:
                    continue
                job.job_stopped_reason = shown.message if shown is not None else None
                if job.termination is not None or job.cancel_requested is not None:  # the next step fails it
                    continue
                if queues.expired_action(job.job_queue, code, now - job.head_since) is not None:
                    assert code is not None
                    self._finish(job, "FAILED", canceled_by_time_limit(code))

    def _start(self, job: EmulatedJob) -> None:
        if job.termination is not None:
            self._finish(job, "FAILED", job.termination)
            return
        if job.halted:  # an MNP child node whose job ended before it started
            self._finish(job, "FAILED", ESSENTIAL_EXITED)
            return
        if len(json.dumps(job.container_overrides or {}, separators=(",", ":"))) > MAX_OVERRIDES_CHARS:
            # SubmitJob took it (under its 30 KiB), ECS refuses the task: FAILED, never started.
            self._finish(job, "FAILED", f"Container Overrides length must be at most {MAX_OVERRIDES_CHARS}")
            return
        job.task_id = uuid.uuid4().hex
        arn = f"arn:aws:ecs:{self.backend.region_name}:{self.backend.account_id}"
        job.latest_attempt = {
            "container": {
                "containerInstanceArn": f"{arn}:container-instance/{job.instance_id}",
                "taskArn": f"{arn}:task/{job.task_id}",
                "networkInterfaces": job.network_interfaces(),
            },
            "startedAt": millis(),
        }
        job.attempts.append(job.latest_attempt)
        job.log_stream_name = None
        try:
            target = open_target(self.logs, job.log_configuration(), job.job_definition.name, job.task_id)
        except LogGroupMissing as error:
            self._failed_to_start(job, str(error))
            return
        if target is not None:  # AWS names the attempt's stream as it reaches RUNNING
            job.log_stream_name = target.stream
            job.latest_attempt["container"]["logStreamName"] = target.stream
        job.job_started_at = datetime.now()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONUNBUFFERED": "1",
            **{e["name"]: e["value"] for e in job.environment()},
            "AWS_BATCH_JOB_ID": job.job_id,  # an MNP node's is <jobId>#<index>
            "AWS_BATCH_JOB_ATTEMPT": str(job.attempt_number()),
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": job.compute_environment or "",
            "AWS_EXECUTION_ENV": "AWS_ECS_EC2",
            **job.extra_environment(),
        }
        env = with_devices(env, self._gpus(job))
        if "TMPDIR" not in env:  # a container's /tmp is its own: torchrun's log directories and the like
            scratch = Path(self.workdir) / "tmp" / f"{job.job_id}-{len(job.attempts)}"
            scratch.mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(scratch)
        image = str((job.container_properties() or {}).get("image") or "")
        argv = self.images.argv(image, job.command())  # ENTRYPOINT + (command or Cmd), as Docker runs it
        if not self.images.exists(image):
            self._failed_to_start(job, pull_error(image))
            return
        if refusal := self.images.refusal(image, argv):
            self._failed_to_start(job, refusal)
            return
        try:
            job.process = subprocess.Popen(
                argv,
                env=self.images.environment(image, env),
                cwd=self.workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            self._failed_to_start(job, f"CannotStartContainerError: {error}")
            return
        job.status = "RUNNING"
        job.reader = threading.Thread(target=self._read_output, args=(job, target), daemon=True)
        job.reader.start()

    def _gpus(self, job: EmulatedJob) -> dict[str, str]:
        """What the ECS agent and the NVIDIA runtime give a container with GPU requirements: its devices."""
        wanted = int(job.resources().get("GPU", 0))
        entry = catalog.lookup(job.offer.accelerator) if job.offer else None
        if not wanted or job.offer is None or entry is None or entry.vendor != "nvidia":
            return {}
        devices = gpus.devices(
            entry.name, list(range(wanted)), str(job.instance_id), memory_gb=job.offer.instance_type.memory_gb
        )
        return gpus.install(devices, Path(self.workdir) / "gpus" / f"{job.job_id}-{len(job.attempts)}")

    def _read_output(self, job: EmulatedJob, target: LogTarget | None) -> None:
        """Read the container's output as it comes; the shipper makes it readable later (or never)."""
        assert job.process is not None and job.process.stdout is not None
        for raw in iter(job.process.stdout.readline, b""):
            if target is not None:
                self.shipper.ship(target, raw.decode("utf-8", "replace").rstrip("\n"))

    def _step_running(self, job: EmulatedJob, now: float) -> None:
        assert job.process is not None
        stopping = job.reclaim is not None or job.termination is not None or job.halted
        if stopping and job.signalled_at is None:
            if job.reclaim is not None and job.reclaim.get("hard"):
                self._signal(job, signal.SIGKILL)
            else:  # like `docker stop`: SIGTERM to the container's main process only
                with contextlib.suppress(ProcessLookupError):
                    job.process.send_signal(signal.SIGTERM)
            job.signalled_at = now
        elif job.signalled_at is not None and now - job.signalled_at > self.stop_timeout:
            self._signal(job, signal.SIGKILL)
        code = job.process.poll()
        if code is None:
            return
        kill_container(job.process.pid)  # like Docker: the container ends with its main process, whatever it left
        if job.reader is not None:
            job.reader.join(timeout=5)
        exit_code: int | None = code if code >= 0 else 128 - code
        if job.reclaim is not None:
            if job.reclaim.get("hard"):
                exit_code = None  # the host vanished: no container exit code at all
            self._end_attempt(job, exit_code, reclaim_reason(job.instance_id))
        elif job.termination is not None:
            self._end_attempt(job, exit_code, job.termination, retry=False)
        else:
            self._end_attempt(job, exit_code, ESSENTIAL_EXITED)

    # --- endings --------------------------------------------------------------------------

    def _failed_to_start(self, job: EmulatedJob, reason: str) -> None:
        """The container never ran (CannotStartContainerError...): no exit code, no log stream."""
        assert job.latest_attempt is not None
        job.latest_attempt["container"]["reason"] = reason
        self._end_attempt(job, None, FAILED_TO_START)

    def _end_attempt(self, job: EmulatedJob, exit_code: int | None, status_reason: str, retry: bool = True) -> None:
        attempt = job.latest_attempt or {"container": {}}
        if exit_code is not None:
            attempt["container"]["exitCode"] = exit_code
        attempt["stoppedAt"] = millis()
        attempt["statusReason"] = status_reason
        job.process, job.reader, job.signalled_at = None, None, None
        reclaimed, job.reclaim = job.reclaim is not None, None
        job.exit_code = exit_code
        if exit_code == 0 and not reclaimed and job.termination is None:
            self._finish(job, "SUCCEEDED", ESSENTIAL_EXITED)
            return
        action = (
            action_after_attempt(
                job.job_definition.retry_strategy,
                attempts_so_far=len(job.attempts),
                status_reason=status_reason,
                reason=attempt["container"].get("reason"),
                exit_code=exit_code,
            )
            if retry and job.termination is None and job.retries_itself
            else "EXIT"
        )
        if action == "RETRY":
            job.status = "RUNNABLE"
            job.compute_environment = job.instance_id = job.instance_type = job.offer = None
            return
        self._finish(job, "FAILED", status_reason)

    def _finish(self, job: EmulatedJob, status: str, reason: str | None) -> None:
        if job.process is not None and job.process.poll() is None:
            self._signal(job, signal.SIGKILL)
        job.finished = True
        job.job_stopped = True
        job.job_stopped_at = datetime.now()
        job.job_stopped_reason = reason
        job.blocked = None
        job.status = status

    @staticmethod
    def _signal(job: EmulatedJob, signum: int) -> None:
        if job.process is not None:
            if signum == signal.SIGKILL:
                kill_container(job.process.pid)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(job.process.pid, signum)


assert sys.platform != "win32", "the Batch emulator runs jobs in POSIX process groups"

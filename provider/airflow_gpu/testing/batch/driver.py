"""The driver: what AWS Batch's scheduler, ECS agent and Docker do to a job, over real time.

Each tick it moves every job one step: SUBMITTED -> RUNNABLE (or PENDING behind dependencies)
-> STARTING once a compute environment of the job's queue offers an instance type with the GPUs,
vCPUs and memory it asks for -> RUNNING with the container command as a local process (own
process group, the Batch environment variables) -> SUCCEEDED or FAILED, with each attempt in
``attempts[]`` as AWS reports it and the output in CloudWatch Logs under the attempt's stream.
A failed attempt goes through the job's ``retryStrategy`` (``retry.py``). Termination and spot
reclaims send SIGTERM, then SIGKILL after ``stop_timeout`` seconds, as ECS does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from typing import Any

from moto.batch.models import BatchBackend
from moto.core.utils import unix_time_millis

from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing.batch.compute import LOG_GROUP
from airflow_gpu.testing.batch.jobs import EmulatedJob
from airflow_gpu.testing.batch.retry import action_after_attempt

ESSENTIAL_EXITED = "Essential container in task exited"


def reclaim_reason(instance_id: str | None) -> str:
    return f"Host EC2 (instance {instance_id}) terminated."


def _millis() -> int:
    return int(unix_time_millis(datetime.now()))


class BatchDriver(threading.Thread):
    """Runs the jobs of one moto Batch backend; ``offers`` says what each compute environment launches."""

    def __init__(
        self,
        backend: BatchBackend,
        logs_backend: Any,
        offers: dict[str, tuple[InstanceOffer, ...]],
        stop_timeout: float = 30.0,
        tick: float = 0.05,
        step_delay: float = 0.2,
    ) -> None:
        super().__init__(daemon=True, name="batch-emulator-driver")
        self.backend, self.logs, self.offers = backend, logs_backend, offers
        self.stop_timeout, self.tick, self.step_delay = stop_timeout, tick, step_delay
        self.stalled: dict[str, str] = {}  # compute environment -> RUNNABLE statusReason
        self._stopping = threading.Event()
        self.workdir = tempfile.mkdtemp(prefix="batch-emulator-")

    # --- loop -----------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stopping.is_set():
            for job in list(self.backend._jobs.values()):
                if isinstance(job, EmulatedJob) and not job.finished:
                    try:
                        self.step(job)
                    except Exception as error:  # one broken job must not stop the others
                        self._finish(job, "FAILED", f"emulator error: {error}")
            self._stopping.wait(self.tick)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
        for job in list(self.backend._jobs.values()):
            if isinstance(job, EmulatedJob) and job.process is not None and job.process.poll() is None:
                self._signal(job, signal.SIGKILL)
                job.process.wait(timeout=10)

    def step(self, job: EmulatedJob) -> None:
        now = time.monotonic()
        if not job.submitted_at:
            job.submitted_at = now
        if job._child_jobs:
            self._step_array_parent(job)
        elif job.status in ("SUBMITTED", "PENDING"):
            self._step_submitted(job, now)
        elif job.status == "RUNNABLE":
            self._step_runnable(job)
        elif job.status == "STARTING":
            self._start(job)
        elif job.status == "RUNNING":
            self._step_running(job, now)

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
        children = job._child_jobs or []
        if job.termination is not None:
            for child in children:
                child.terminate(job.termination)
        if job.status == "SUBMITTED":
            job.status = "PENDING"
        if all(c.status in ("SUCCEEDED", "FAILED") for c in children):
            failed = [c for c in children if c.status == "FAILED"]
            self._finish(job, "FAILED" if failed else "SUCCEEDED", job.termination or None)

    def _step_runnable(self, job: EmulatedJob) -> None:
        if job.termination is not None:
            self._finish(job, "FAILED", job.termination)
            return
        placement = self._placement(job)
        if isinstance(placement, str):
            job.job_stopped_reason = placement  # shown as statusReason while RUNNABLE
            return
        job.compute_environment, offer = placement
        job.instance_type = offer.instance_type.name
        job.instance_id = f"i-{uuid.uuid4().hex[:17]}"
        job.job_stopped_reason = None
        job.status = "STARTING"

    def _placement(self, job: EmulatedJob) -> tuple[str, InstanceOffer] | str:
        """The first compute environment (in queue order) that can host the job, or why none can."""
        wants = job.resources()
        order = sorted(job.job_queue.env_order_json, key=lambda entry: entry["order"])
        names = [entry["computeEnvironment"].rsplit("/", 1)[-1] for entry in order]
        reasons = []
        for name in names:
            fitting = [
                o
                for o in self.offers.get(name, ())
                if o.instance_type.accelerators >= wants["GPU"]
                and o.instance_type.vcpus >= wants["VCPU"]
                and o.instance_type.memory_gib * 1024 >= wants["MEMORY"]
            ]
            if not fitting:
                reasons.append(name)
                continue
            if name in self.stalled:
                return self.stalled[name]
            smallest = min(fitting, key=lambda o: (o.instance_type.accelerators, o.instance_type.vcpus))
            return name, smallest
        return (
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement "
            f"(GPU: {wants['GPU']:g}, vCPU: {wants['VCPU']:g}, memory: {wants['MEMORY']:g} MiB) is higher than "
            f"that can be met by the CE(s) attached to the job queue ({', '.join(reasons)})."
        )

    def _start(self, job: EmulatedJob) -> None:
        if job.termination is not None:
            self._finish(job, "FAILED", job.termination)
            return
        job.task_id = uuid.uuid4().hex
        job.log_stream_name = f"{job.job_definition.name}/default/{job.task_id}"
        job.job_started_at = datetime.now()
        job.latest_attempt = {
            "container": {
                "containerInstanceArn": f"arn:aws:ecs:{self.backend.region_name}:{self.backend.account_id}:"
                f"container-instance/{job.instance_id}",
                "taskArn": f"arn:aws:ecs:{self.backend.region_name}:{self.backend.account_id}:task/{job.task_id}",
                "logStreamName": job.log_stream_name,
                "networkInterfaces": [],
            },
            "startedAt": _millis(),
        }
        job.attempts.append(job.latest_attempt)
        with contextlib.suppress(Exception):  # the stream may exist from an earlier attempt
            self.logs.create_log_stream(LOG_GROUP, job.log_stream_name)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONUNBUFFERED": "1",
            **{e["name"]: e["value"] for e in job.environment()},
            "AWS_BATCH_JOB_ID": job.job_id,
            "AWS_BATCH_JOB_ATTEMPT": str(len(job.attempts)),
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": job.compute_environment or "",
            "AWS_EXECUTION_ENV": "AWS_ECS_EC2",
        }
        if job.array_index is not None:
            env["AWS_BATCH_JOB_ARRAY_INDEX"] = str(job.array_index)
        command = job.command()
        job.status = "RUNNING"
        try:
            job.process = subprocess.Popen(
                command or ["true"],
                env=env,
                cwd=self.workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:  # CannotStartContainerError in Batch's words
            job.latest_attempt["container"]["reason"] = f"CannotStartContainerError: {error}"
            self._end_attempt(job, None, f"CannotStartContainerError: {error}")
            return
        job.reader = threading.Thread(target=self._ship_logs, args=(job,), daemon=True)
        job.reader.start()

    def _ship_logs(self, job: EmulatedJob) -> None:
        assert job.process is not None and job.process.stdout is not None
        stream = job.log_stream_name
        for raw in iter(job.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with contextlib.suppress(Exception):
                self.logs.put_log_events(LOG_GROUP, stream, [{"timestamp": _millis(), "message": line}])

    def _step_running(self, job: EmulatedJob, now: float) -> None:
        assert job.process is not None
        stopping = job.reclaim is not None or job.termination is not None
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

    def _end_attempt(self, job: EmulatedJob, exit_code: int | None, status_reason: str, retry: bool = True) -> None:
        attempt = job.latest_attempt or {"container": {}}
        if exit_code is not None:
            attempt["container"]["exitCode"] = exit_code
        attempt["stoppedAt"] = _millis()
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
            if retry
            else "EXIT"
        )
        if action == "RETRY":
            job.status = "RUNNABLE"
            job.compute_environment = job.instance_id = job.instance_type = None
            return
        self._finish(job, "FAILED", status_reason)

    def _finish(self, job: EmulatedJob, status: str, reason: str | None) -> None:
        if job.process is not None and job.process.poll() is None:
            self._signal(job, signal.SIGKILL)
        job.finished = True
        job.job_stopped = True
        job.job_stopped_at = datetime.now()
        job.job_stopped_reason = reason
        job.status = status

    @staticmethod
    def _signal(job: EmulatedJob, signum: int) -> None:
        if job.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.process.pid, signum)


assert sys.platform != "win32", "the Batch emulator runs jobs in POSIX process groups"

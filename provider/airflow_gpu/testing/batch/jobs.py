"""``EmulatedJob``: moto's Batch ``Job`` with its status in our hands and a real process behind it.

moto's no-Docker backend finishes every job inside SubmitJob and advances statuses on its own
state machine. The driver (``driver.py``) owns the lifecycle instead, so the status is a plain
attribute here; the rest of moto's ``Job`` (describe shapes, ARNs, tags, queues) stays as is.

CancelJob and TerminateJob differ (Batch API reference): CancelJob acts only on a job that has not
started (SUBMITTED, PENDING, RUNNABLE), TerminateJob on any job not yet final. ``cancel`` checks the
status and ``lock`` makes that check and the driver's move to STARTING one step each, so a cancel
never lands on a job that has already begun to start.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
from datetime import datetime
from typing import Any

from moto.batch.models import Job

from airflow_gpu.accelerators.batch import InstanceOffer
from airflow_gpu.testing.batch.reasons import Blocked

NOT_STARTED = ("SUBMITTED", "PENDING", "RUNNABLE")
NEVER = datetime(1970, 1, 1)  # moto's job_started_at until the driver starts the container
_sequence = itertools.count()


class EmulatedJob(Job):
    """One job (or array child) the driver runs; the fields below are the driver's bookkeeping."""

    def __init__(self, *args: Any, array_index: int | None = None, **kwargs: Any) -> None:
        self._plain_status: str | None = "SUBMITTED"
        super().__init__(*args, **kwargs)
        self.array_index = array_index
        self.sequence = next(_sequence)  # submission order: the head of a queue is its oldest RUNNABLE job
        self.lock = threading.Lock()
        self.submitted_at = 0.0  # monotonic; set by the driver when it first sees the job
        self.process: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.compute_environment: str | None = None
        self.instance_id: str | None = None
        self.instance_type: str | None = None
        self.offer: InstanceOffer | None = None  # what the instance carries: the job's GPUs
        self.task_id: str | None = None
        self.termination: str | None = None  # TerminateJob / CancelJob reason
        self.cancelled = False  # the termination came from CancelJob (an array parent passes it on as such)
        self.blocked: Blocked | None = None  # why the driver could not place it, while RUNNABLE
        self.head_code: str | None = None  # the reason it shows at the head of its queue...
        self.head_since = 0.0  # ...since this monotonic time
        self.reclaim: dict[str, Any] | None = None  # an injected spot reclaim
        self.signalled_at: float | None = None
        self.finished = False

    # moto's ManagedState moves the status by itself; the driver sets it explicitly.
    @property
    def status(self) -> str | None:
        return self._plain_status

    @status.setter
    def status(self, value: str | None) -> None:
        self._plain_status = value

    def terminate(self, reason: str) -> None:
        """TerminateJob lands here; the driver stops the process (if any) and fails the job."""
        with self.lock:
            if not self.finished and self.termination is None:
                self.termination = reason

    def cancel(self, reason: str) -> None:
        """CancelJob: fail the job if it has not started; once STARTING or RUNNING, do nothing."""
        with self.lock:
            if not self.finished and self.termination is None and self.status in NOT_STARTED:
                self.termination, self.cancelled = reason, True

    def log_configuration(self) -> dict[str, Any] | None:
        """The job definition's ``logConfiguration`` (a job cannot override it)."""
        configuration = (self.job_definition.container_properties or {}).get("logConfiguration")
        return dict(configuration) if configuration else None

    def _get_container_property(self, p: str, default: Any) -> Any:
        if p == "environment":  # moto appends AWS_BATCH_JOB_ID to the override list on every describe
            return self.environment()
        return super()._get_container_property(p, default)

    def describe(self) -> dict[str, Any]:
        """moto's shape, plus the container fields AWS reports for the last attempt."""
        result: dict[str, Any] = super().describe()
        if "container" in result and self.latest_attempt is not None:
            container = self.latest_attempt.get("container", {})
            for key in ("exitCode", "reason", "containerInstanceArn", "taskArn"):
                if key in container:
                    result["container"][key] = container[key]
        if self.job_started_at == NEVER:  # moto reports 1970 for a job that failed before it ever ran
            result.pop("startedAt", None)
        if "container" in result and self.log_configuration() is not None:
            result["container"]["logConfiguration"] = self.log_configuration()
        if self.array_index is not None:
            result["arrayProperties"] = {"index": self.array_index}
        return result

    def environment(self) -> list[dict[str, str]]:
        """The container environment: the job definition's, overridden by the job's."""
        assert self.job_definition.container_properties is not None
        merged = {e["name"]: e["value"] for e in self.job_definition.container_properties.get("environment") or []}
        merged.update({e["name"]: e["value"] for e in self.container_overrides.get("environment") or []})
        return [{"name": k, "value": v} for k, v in merged.items()]

    def resources(self) -> dict[str, float]:
        """GPU, VCPU and MEMORY the job asks for, overrides winning."""
        assert self.job_definition.container_properties is not None
        found: dict[str, float] = {"GPU": 0.0, "VCPU": 1.0, "MEMORY": 512.0}
        properties = self.job_definition.container_properties
        if properties.get("vcpus"):
            found["VCPU"] = float(properties["vcpus"])
        if properties.get("memory"):
            found["MEMORY"] = float(properties["memory"])
        for source in (properties.get("resourceRequirements"), self.container_overrides.get("resourceRequirements")):
            for item in source or []:
                found[item["type"]] = float(item["value"])
        return found

    def command(self) -> list[str]:
        command = self.container_overrides.get("command") or (self.job_definition.container_properties or {}).get(
            "command"
        )
        return self._add_parameters_to_command(list(command or []))

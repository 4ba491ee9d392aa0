"""``EmulatedJob``: moto's Batch ``Job`` with its status in our hands and a real process behind it.

moto's no-Docker backend finishes every job inside SubmitJob and advances statuses on its own
state machine. The driver (``driver.py``) owns the lifecycle instead, so the status is a plain
attribute here; the rest of moto's ``Job`` (describe shapes, ARNs, tags, queues) stays as is.

CancelJob and TerminateJob differ (Batch API reference): CancelJob acts only on a job that has not
started (SUBMITTED, PENDING, RUNNABLE), TerminateJob on any job not yet final. ``cancel`` checks the
status and ``lock`` makes that check and the driver's move to STARTING one step each, so a cancel
never lands on a job that has already begun to start. With the emulator's ``cancel_at_head`` (what
earlier API references said: "A job in RUNNABLE remains in RUNNABLE until it reaches the head of
the job queue. Then the job status is updated to FAILED."), a RUNNABLE job's cancel is recorded as
``cancel_requested`` and applied only once the job heads its queue; until then the job may still be
placed and start. TerminateJob's stop is never deferred: a job that starts is stopped.

What the job runs comes from ``container_properties()`` (the job definition's container; for a
multi-node parallel node, its node range's: ``nodes.py``), so nodes share every method here.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
from collections.abc import Mapping
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

    #: Whether a failed attempt goes through the retryStrategy here (an MNP node's job decides for it).
    retries_itself = True

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
        self.cancel_requested: str | None = None  # a CancelJob on the RUNNABLE job, not applied yet
        self.at_head = False  # the oldest RUNNABLE job of its queue, as of the last tick
        self.blocked: Blocked | None = None  # why the driver could not place it, while RUNNABLE
        self.head_code: str | None = None  # the reason it shows at the head of its queue...
        self.head_since = 0.0  # ...since this monotonic time
        self.reclaim: dict[str, Any] | None = None  # an injected spot reclaim
        self.signalled_at: float | None = None
        self.halted = False  # Batch stops it because its job is over (an MNP main node exited)
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

    def cancel(self, reason: str, at_head: bool = False) -> None:
        """CancelJob: fail the job if it has not started; once STARTING or RUNNING, do nothing. With
        ``at_head``, a RUNNABLE job's cancel waits until it heads its queue (``cancel_requested``)."""
        with self.lock:
            if self.finished or self.termination is not None or self.status not in NOT_STARTED:
                return
            if self.status == "RUNNABLE" and at_head:
                self.cancel_requested = self.cancel_requested or reason
            else:
                self.termination, self.cancelled = reason, True

    def take_cancel(self) -> None:
        """Apply a RUNNABLE job's waiting CancelJob once it heads its queue (the caller holds ``lock``)."""
        if self.cancel_requested is not None and self.termination is None and self.at_head:
            self.termination, self.cancelled = self.cancel_requested, True

    def container_properties(self) -> dict[str, Any] | None:
        """The container this job runs, before its overrides (an MNP node: its node range's)."""
        return self.job_definition.container_properties

    def log_configuration(self) -> dict[str, Any] | None:
        """The job definition's ``logConfiguration`` (a job cannot override it)."""
        configuration = (self.container_properties() or {}).get("logConfiguration")
        return dict(configuration) if configuration else None

    def _get_container_property(self, p: str, default: Any) -> Any:
        """moto's answer, from ``container_properties()`` rather than the job definition's."""
        properties = self.container_properties() or {}
        if p == "environment":  # moto appends AWS_BATCH_JOB_ID to the override list on every describe
            return self.environment()
        if p in ("vcpus", "memory"):
            if p in self.container_overrides:
                return self.container_overrides[p]
            wanted = {r["type"]: r["value"] for r in properties.get("resourceRequirements") or []}
            if p == "vcpus" and "VCPU" in wanted:
                return float(wanted["VCPU"])
            if p == "memory" and "MEMORY" in wanted:
                return int(wanted["MEMORY"])
        return self.container_overrides.get(p, properties.get(p, default))

    def network_interfaces(self) -> list[dict[str, str]]:
        """The attempt's ENIs: none for a plain container job (the ECS ``bridge`` network mode)."""
        return []

    def extra_environment(self) -> dict[str, str]:
        """The Batch variables of this kind of job, beside the ones every job gets."""
        if self.array_index is not None:
            return {"AWS_BATCH_JOB_ARRAY_INDEX": str(self.array_index)}
        return {}

    def attempt_number(self) -> int:
        """``AWS_BATCH_JOB_ATTEMPT``: which attempt of the job this is."""
        return len(self.attempts)

    def describe(self) -> dict[str, Any]:
        """moto's shape, plus the container fields AWS reports for the last attempt."""
        result: dict[str, Any] = super().describe()
        properties = self.container_properties()
        if "container" in result and properties is not None:  # moto shows an MNP node only its log stream
            result["container"] = {"image": properties.get("image"), **self._container_details()}
        if "container" in result and self.latest_attempt is not None:
            container = self.latest_attempt.get("container", {})
            for key in ("exitCode", "reason", "containerInstanceArn", "taskArn", "networkInterfaces"):
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
        properties = self.container_properties()
        assert properties is not None
        merged = {e["name"]: e["value"] for e in properties.get("environment") or []}
        merged.update({e["name"]: e["value"] for e in self.container_overrides.get("environment") or []})
        return [{"name": k, "value": v} for k, v in merged.items()]

    def resources(self) -> dict[str, float]:
        """GPU, VCPU and MEMORY the job asks for, overrides winning."""
        properties = self.container_properties()
        assert properties is not None
        return requested_resources(properties, self.container_overrides)

    def command(self) -> list[str]:
        command = self.container_overrides.get("command") or (self.container_properties() or {}).get("command")
        return self._add_parameters_to_command(list(command or []))


def requested_resources(properties: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, float]:
    """GPU, VCPU and MEMORY a container asks for (``resourceRequirements``, or the older ``vcpus`` and
    ``memory``), its overrides winning."""
    found: dict[str, float] = {"GPU": 0.0, "VCPU": 1.0, "MEMORY": 512.0}
    if properties.get("vcpus"):
        found["VCPU"] = float(properties["vcpus"])
    if properties.get("memory"):
        found["MEMORY"] = float(properties["memory"])
    for source in (properties.get("resourceRequirements"), overrides.get("resourceRequirements")):
        for item in source or []:
            found[item["type"]] = float(item["value"])
    return found

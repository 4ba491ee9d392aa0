"""``EmulatedJob``: moto's Batch ``Job`` with its status in our hands and a real process behind it.

moto's no-Docker backend finishes every job inside SubmitJob and advances statuses on its own
state machine. The driver (``driver.py``) owns the lifecycle instead, so the status is a plain
attribute here; the rest of moto's ``Job`` (describe shapes, ARNs, tags, queues) stays as is.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from moto.batch.models import Job


class EmulatedJob(Job):
    """One job (or array child) the driver runs; the fields below are the driver's bookkeeping."""

    def __init__(self, *args: Any, array_index: int | None = None, **kwargs: Any) -> None:
        self._plain_status: str | None = "SUBMITTED"
        super().__init__(*args, **kwargs)
        self.array_index = array_index
        self.submitted_at = 0.0  # monotonic; set by the driver when it first sees the job
        self.process: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.compute_environment: str | None = None
        self.instance_id: str | None = None
        self.instance_type: str | None = None
        self.task_id: str | None = None
        self.termination: str | None = None  # TerminateJob / CancelJob reason
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
        """TerminateJob and CancelJob land here; the driver stops the process and fails the job."""
        if not self.finished and self.termination is None:
            self.termination = reason

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

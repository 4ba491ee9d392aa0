"""Where a job's output goes in CloudWatch Logs, and the lag before it can be read there.

Destination (AWS Batch User Guide, "Use the awslogs log driver"): the job definition's
``logConfiguration``, by default the ``awslogs`` driver into ``/aws/batch/job``; ``awslogs-group``
picks another group, which must exist unless ``awslogs-create-group`` is ``"true"`` (else Docker's
awslogs driver cannot start the container). The stream is
``<awslogs-stream-prefix or job definition name>/default/<ECS task id>``. Any other driver
(``json-file``, ``splunk``...) sends nothing to CloudWatch, so the attempt gets no stream.
``awslogs-region`` is not followed: the emulator has one region.

Ingestion: CloudWatch makes an event readable a moment after the agent sent it, so a job can be
SUCCEEDED while its last lines are not yet in ``GetLogEvents``. ``LogShipper`` holds each line
for ``delay`` seconds, in order, on a thread of its own, so a job's status never waits for its logs.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from moto.core.utils import unix_time_millis

from airflow_gpu.testing.batch.compute import LOG_GROUP

MISSING_GROUP = (
    "CannotStartContainerError: Error response from daemon: failed to initialize logging driver: failed to "
    "create Cloudwatch log stream: ResourceNotFoundException: The specified log group does not exist."
)


def millis() -> int:
    return int(unix_time_millis(datetime.now()))


@dataclass(frozen=True)
class LogTarget:
    group: str
    stream: str


class LogGroupMissing(Exception):
    """The ``awslogs-group`` does not exist and may not be created: the container cannot start."""


def open_target(logs: Any, configuration: dict[str, Any] | None, definition: str, task_id: str) -> LogTarget | None:
    """Create the attempt's stream (and group, if allowed); None when the driver is not ``awslogs``."""
    configuration = configuration or {}
    if configuration.get("logDriver", "awslogs") != "awslogs":
        return None
    options = configuration.get("options") or {}
    target = LogTarget(
        options.get("awslogs-group", LOG_GROUP),
        f"{options.get('awslogs-stream-prefix') or definition}/default/{task_id}",
    )
    if target.group not in logs.groups:
        if str(options.get("awslogs-create-group", "false")).lower() != "true":
            raise LogGroupMissing(MISSING_GROUP)
        with contextlib.suppress(Exception):  # another job created it first
            logs.create_log_group(target.group, {})
    with contextlib.suppress(Exception):  # the stream may exist from an earlier attempt
        logs.create_log_stream(target.group, target.stream)
    return target


class LogShipper(threading.Thread):
    """Puts each line into CloudWatch ``delay`` seconds after the job wrote it, in the order written."""

    def __init__(self, logs: Any, delay: float) -> None:
        super().__init__(daemon=True, name="batch-emulator-logs")
        self.logs, self.delay = logs, delay
        self._pending: queue.Queue[tuple[float, LogTarget, dict[str, Any]] | None] = queue.Queue()
        self._flush = threading.Event()

    def ship(self, target: LogTarget, message: str) -> None:
        event = {"timestamp": millis(), "message": message}  # the time written, as the agent stamps it
        if self.delay <= 0:
            self._put(target, event)
        else:
            self._pending.put((time.monotonic() + self.delay, target, event))

    def run(self) -> None:
        while (item := self._pending.get()) is not None:
            due, target, event = item
            self._flush.wait(max(0.0, due - time.monotonic()))  # one delay for all: FIFO is time order
            self._put(target, event)

    def stop(self) -> None:
        """Put what is still held at once, then end."""
        self._flush.set()
        self._pending.put(None)
        self.join(timeout=10)

    def _put(self, target: LogTarget, event: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            self.logs.put_log_events(target.group, target.stream, [event])

"""A Batch job's attempts' CloudWatch logs in the Airflow task log, from the job's own log group.

Each attempt writes its own stream, in the group its job definition names (``awslogs-group``,
else ``/aws/batch/job``); a job that logs through another driver has no CloudWatch logs, which is
not a failure. CloudWatch makes events readable seconds after they were written, so an attempt's
last lines (the SIGTERM a reclaim caused, a traceback) arrive after the attempt ended: each
stream is followed until the job has ended and its lines had ``lag`` seconds to arrive, without
holding up the next submission. A synchronous task follows the attempts live with the amazon
provider's ``AwsTaskLogFetcher``; a deferred one prints every attempt once the job has ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.providers.amazon.aws.utils.task_log_fetcher import AwsTaskLogFetcher

#: Where a job logs when its definition names no ``awslogs-group`` (the Batch default).
DEFAULT_LOG_GROUP = "/aws/batch/job"


def log_group(job: Mapping[str, Any]) -> str | None:
    """The job's CloudWatch log group, as ``get_job_all_awslogs_info`` reads it; None without awslogs."""
    configuration = (job.get("container") or {}).get("logConfiguration") or {}
    if configuration.get("logDriver", "awslogs") != "awslogs":
        return None
    return str((configuration.get("options") or {}).get("awslogs-group") or DEFAULT_LOG_GROUP)


def attempt_streams(job: Mapping[str, Any]) -> list[str]:
    """Each attempt's log stream, oldest first (the running attempt's last)."""
    streams = [(a.get("container") or {}).get("logStreamName") for a in job.get("attempts") or []]
    streams.append((job.get("container") or {}).get("logStreamName"))
    return [s for s in dict.fromkeys(streams) if s]


class AttemptLogs:
    """Follows every attempt's stream of the jobs it is shown; ``close`` reads what is left."""

    def __init__(
        self, aws_conn_id: str | None, region_name: str | None, fetch_interval: timedelta, logger: Any, lag: float
    ) -> None:
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        self.fetch_interval, self.logger, self.lag = fetch_interval, logger, lag
        self._following: dict[str, AwsTaskLogFetcher] = {}
        self._retiring: list[threading.Timer] = []

    def _fetcher(self, group: str, stream: str) -> AwsTaskLogFetcher:
        return AwsTaskLogFetcher(
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            log_group=group,
            log_stream_name=stream,
            fetch_interval=self.fetch_interval,
            logger=self.logger,
        )

    def follow(self, job: Mapping[str, Any]) -> None:
        """Stream each attempt's log as it appears (Batch retrying a reclaim starts a new stream)."""
        group = log_group(job)
        for stream in attempt_streams(job) if group else []:
            if stream not in self._following:
                self._following[stream] = self._fetcher(str(group), stream)
                self._following[stream].start()

    def retire(self, job: Mapping[str, Any]) -> None:
        """The job ended and another follows: stop its streams ``lag`` seconds from now, not waiting."""
        for stream in attempt_streams(job):
            fetcher = self._following.pop(stream, None)
            if fetcher is not None:
                timer = threading.Timer(self.lag, _stop, args=(fetcher,))
                timer.daemon = True
                timer.start()
                self._retiring.append(timer)

    def close(self, settle: bool) -> None:
        """Stop following; with ``settle``, first give the last lines ``lag`` seconds to arrive."""
        if settle and self._following:
            time.sleep(self.lag)
        for fetcher in self._following.values():
            _stop(fetcher)
        self._following.clear()
        for timer in self._retiring:
            timer.join()
        self._retiring.clear()

    def print_all(self, job: Mapping[str, Any]) -> None:
        """Every attempt's lines, once (a deferred task did not follow them)."""
        group = log_group(job)
        for stream in attempt_streams(job) if group else []:
            fetcher = self._fetcher(str(group), stream)
            fetcher.start()
            _stop(fetcher)


def _stop(fetcher: AwsTaskLogFetcher) -> None:
    """Stop a fetcher; its thread reads the stream one last time before it ends."""
    fetcher.stop()  # type: ignore[no-untyped-call]
    fetcher.join()

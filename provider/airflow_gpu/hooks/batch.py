"""``GPUBatchHook``: the amazon provider's ``BatchClientHook`` plus what a GPU job needs from Batch.

What the official hook does not do: register a job definition only when its content
changed (a DAG parsed every few seconds must not add a revision per run), describe many jobs in
one call (DescribeJobs takes 100 ids, and Batch throttles it: retried with backoff, as
``get_job_description`` does), and say which GPUs a queue can actually launch, so that a job that
would sit in RUNNABLE forever fails with "queue gpu-spot offers g5 (A10G) only" instead. It also
reads a job's logs where the job writes them (its own ``awslogs-group``), waiting out CloudWatch's
ingestion lag for the result line.

Every call rides out transient errors (``utils.batch_retries``): the clients use botocore's standard
retry mode with more attempts than its default (unless the connection's ``config_kwargs`` sets
``retries``), and a call still failing transiently is tried again a few rounds more. SubmitJob is
sent once per try by botocore (Batch has no idempotency token for it): after an answer that may
have been lost, ``submit_job_once`` (``batch_submit``) looks the job up by name and task-try tags,
for as long as ListJobs may take to list it, before sending it again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from functools import cached_property, partial
from typing import Any

from airflow.sdk.exceptions import AirflowException
from botocore.config import Config

try:
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError("GPUBatchHook needs the amazon provider: pip install 'airflow-provider-gpu[amazon]'") from error

from airflow_gpu.accelerators.batch import instance_offers
from airflow_gpu.accelerators.batch_queues import QueueOffer, unreadable_types
from airflow_gpu.hooks import batch_submit
from airflow_gpu.hooks.aws_clients import OneSessionClients
from airflow_gpu.hooks.batch_submit import Keep, Stop, Submitted
from airflow_gpu.utils import batch_retries, retry_deadline, supervisor_requests
from airflow_gpu.utils.batch_logs import DEFAULT_LOG_GROUP, attempt_streams, log_group
from airflow_gpu.utils.batch_retries import retry_transient
from airflow_gpu.utils.results import WorkloadOutput, read_output

__all__ = ["DEFAULT_LOG_GROUP", "SPEC_HASH_TAG", "GPUBatchHook", "QueueOffer", "definition_hash"]

_MISSING = object()
#: Connection id -> its last good read in this process (``for_trigger``): a failed re-read keeps it.
_LAST_READ: dict[str, Any] = {}
#: Tag on a job definition revision: the hash of what was registered.
SPEC_HASH_TAG = "airflow-gpu/spec-hash"
DESCRIBE_JOBS_LIMIT = 100
SPOT_TYPES = frozenset({"SPOT", "FARGATE_SPOT"})
#: Rounds (each botocore's own attempts) DescribeJobs gets while it fails transiently.
THROTTLE_RETRIES = 8
#: Polls for a job DescribeJobs does not return yet before the job is taken for lost.
MISSING_POLLS = 5
#: Seconds a job may stay RUNNABLE after CancelJob before it is terminated instead.
CANCEL_TIMEOUT = 60.0


def definition_hash(definition: Mapping[str, Any]) -> str:
    """A stable hash of a job definition's content (sorted keys), for reuse across parses."""
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()[:16]


class GPUBatchHook(OneSessionClients, BatchClientHook):
    """``BatchClientHook`` with idempotent job definitions, batched describes and GPU queue offers."""

    #: The connection read in the triggerer's event loop (``for_trigger``); ``_MISSING``: there is none.
    _prefetched: Any = None

    @classmethod
    async def for_trigger(cls, aws_conn_id: str | None, region_name: str | None) -> GPUBatchHook:
        """A hook for a trigger's worker threads, its connection already read in the event loop.

        A trigger calls the (blocking) boto3 client from threads, and the hook reads its connection
        on first use. In a triggerer a connection is fetched from the supervisor: in Airflow 3.2
        a fetch from a thread races the event loop's own requests on that channel and kills the
        trigger runner ("Response read out of order"); 3.3 routes them through the loop. Reading it
        here, with ``aget_connection`` in the loop, keeps the threads off that channel on both.

        A read that fails after a good one keeps that one (a warning says so): the supervisor answers
        a transient error as "not found" (``ExecutionAPISecretsBackend`` returns None on any error
        response, then ``aget_connection`` raises ``AirflowNotFoundException``), and taking it at
        its word would run the poller on the triggerer's own boto3 credentials until ``HOOK_TTL``.

        The read goes through ``utils.supervisor_requests``: a trigger cancelled while it waits (the
        runner removing it) must not cut the request in half, which on Airflow 3.2 left its answer
        to the next request and killed the trigger runner ("Response read out of order").
        """
        hook = cls(aws_conn_id=aws_conn_id, region_name=region_name)
        if aws_conn_id:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                read = await supervisor_requests.request(cls.aget_connection(aws_conn_id))
                hook._prefetched = _LAST_READ[aws_conn_id] = read
            except Exception as error:
                previous = _LAST_READ.get(aws_conn_id)
                if previous is not None:
                    hook.log.warning(
                        "Connection %s could not be read again (%s: %s); the one read before stays in use",
                        aws_conn_id, type(error).__name__, error,
                    )  # fmt: skip
                    hook._prefetched = previous
                elif isinstance(error, AirflowNotFoundException):
                    hook._prefetched = _MISSING  # boto3's own credential chain, as the hook does without one
                else:
                    raise
        # The connection's extras are read (``extra_dejson``) when ``conn_config`` is built, and each
        # read masks them, telling the supervisor through the same channel; from a thread, on 3.2, that
        # is the race above. Built here in the loop (the telling is then skipped: it cannot block the
        # loop), the cached wrapper serves every thread.
        hook.conn_config  # noqa: B018 (a cached property, built for its side effect)
        return hook

    def get_connection(self, conn_id: str) -> Any:  # type: ignore[override]
        """The prefetched connection (``for_trigger``), else Airflow's."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        if self._prefetched is _MISSING:
            raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        if self._prefetched is not None and self._prefetched.conn_id == conn_id:
            return self._prefetched
        return super().get_connection(conn_id)

    @property
    def config(self) -> Config:
        """The connection's botocore config, with our retries unless it sets its own (``batch_retries``)."""
        return batch_retries.with_retries(super().config)

    @property
    def api(self) -> Any:
        """The boto3 Batch client (``client`` is typed as the provider's partial protocol)."""
        return self.client

    @cached_property
    def _submit_api(self) -> Any:
        """A Batch client whose calls botocore sends once: SubmitJob must not be sent twice blindly (and a
        kill's TerminateJob is paced by its own budget)."""
        return self.get_client_type(config=batch_retries.without_retries(super().config))

    def submit_job_once(
        self,
        args: Mapping[str, Any],
        keep: Keep,
        stop: Stop | None = None,
        log: Any = None,
        leave: Stop | None = None,
    ) -> Submitted:
        """SubmitJob, never twice for one job of this task try (``batch_submit``: a lost answer is looked
        up by name and task-try tags over a minute of ListJobs reads before the job is sent again), and
        nothing sent, a job created terminated, once ``stop()`` says the task was killed (``Withdrawn``);
        nothing sent, a job created left as it is, once ``leave()`` says the try can no longer act (``Left``)."""
        return batch_submit.submit_job_once(self, args, keep, stop, log, leave)

    def terminate(self, job_id: str, reason: str) -> None:
        """TerminateJob, through transient errors: a job left running is billed. Inside a trigger's kill
        (``retry_deadline``) each round is one request, the rounds bounded by the kill's budget: botocore's
        own attempts (a minute or two) would outlast it."""
        api = self._submit_api if retry_deadline.left() is not None else self.api
        retry_transient(f"TerminateJob {job_id}", lambda: api.terminate_job(jobId=job_id, reason=reason), self.log)

    def cancel(self, job_id: str, reason: str) -> None:
        """CancelJob, through transient errors."""
        retry_transient(f"CancelJob {job_id}", lambda: self.api.cancel_job(jobId=job_id, reason=reason), self.log)

    def register_job_definition_once(self, name: str, definition: Mapping[str, Any]) -> str:
        """The ARN of an active revision of ``name`` with exactly ``definition``, registering one if none.

        ``definition`` is RegisterJobDefinition's arguments without the name (type,
        containerProperties, retryStrategy, ...). Its hash goes in a tag, so a changed spec gets a
        new revision and an unchanged one reuses the active revision. Through transient errors the
        look-up and the registration are tried again together (a registration whose answer was lost
        is then found); botocore's own retry of a lost RegisterJobDefinition can leave a second,
        identical revision, which is harmless.
        """
        return retry_transient(f"RegisterJobDefinition {name}", lambda: self._register_once(name, definition), self.log)

    def _register_once(self, name: str, definition: Mapping[str, Any]) -> str:
        digest = definition_hash(definition)
        paginator = self.api.get_paginator("describe_job_definitions")
        for page in paginator.paginate(jobDefinitionName=name, status="ACTIVE"):
            for revision in page["jobDefinitions"]:
                if (revision.get("tags") or {}).get(SPEC_HASH_TAG) == digest:
                    return str(revision["jobDefinitionArn"])
        tags = {**(definition.get("tags") or {}), SPEC_HASH_TAG: digest}
        answer = self.api.register_job_definition(jobDefinitionName=name, **{**definition, "tags": tags})
        self.log.info("Registered job definition %s (spec %s)", answer["jobDefinitionArn"], digest)
        return str(answer["jobDefinitionArn"])

    def describe_jobs_batched(self, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """DescribeJobs for any number of ids, 100 per call; ids Batch does not (yet) know are absent."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), DESCRIBE_JOBS_LIMIT):
            for job in self._describe_jobs(ids[start : start + DESCRIBE_JOBS_LIMIT]):
                found[job["jobId"]] = job
        return found

    def describe_job(self, job_id: str, interval: float, missing_polls: int = MISSING_POLLS) -> dict[str, Any]:
        """One job; DescribeJobs is eventually consistent, so a job just submitted may be missing a few times."""
        for poll in range(missing_polls):
            job = self.describe_jobs_batched([job_id]).get(job_id)
            if job is not None:
                return job
            time.sleep(min(interval, 2**poll))
        raise AirflowException(f"AWS Batch does not know job {job_id} after {missing_polls} DescribeJobs")

    def cancel_runnable(
        self, job_id: str, reason: str, interval: float, timeout: float | None = None
    ) -> dict[str, Any]:
        """CancelJob, then the job once it left RUNNABLE: FAILED if the cancel took, else STARTING or later.

        CancelJob only acts on SUBMITTED, PENDING and RUNNABLE jobs; a job that left RUNNABLE
        between the describe and the cancel keeps running, and must be followed, never replaced.
        Earlier CancelJob references say a cancelled RUNNABLE job stays RUNNABLE until it reaches
        the head of its queue: still RUNNABLE after ``timeout`` (``CANCEL_TIMEOUT``), the job is
        terminated (``stop_uncancelled``), so that it cannot start later with nobody following it.
        """
        self.log.warning("Cancelling job %s: %s", job_id, reason)
        self.cancel(job_id, reason)
        deadline = time.monotonic() + (CANCEL_TIMEOUT if timeout is None else timeout)
        while True:
            current = self.describe_job(job_id, interval)
            if current["status"] not in ("RUNNABLE", "FAILED", "SUCCEEDED"):
                self.log.info("Job %s started before the cancel (%s): following it", job_id, current["status"])
            if current["status"] != "RUNNABLE":
                return current
            if time.monotonic() >= deadline:
                return self.stop_uncancelled(current, reason)
            time.sleep(min(interval, 2))

    def stop_uncancelled(self, job: Mapping[str, Any], reason: str) -> dict[str, Any]:
        """A job still RUNNABLE long after CancelJob: TerminateJob, which stops a job in any state up to
        RUNNING (a cancel that has not taken may still let it start). It is taken as ended, FAILED
        with ``reason``, as Batch will show it: the run moves on without waiting for that."""
        job_id = str(job["jobId"])
        self.log.warning("Job %s is still RUNNABLE after CancelJob: terminating it", job_id)
        self.terminate(job_id, reason)
        return {**job, "status": "FAILED", "statusReason": reason}

    def jobs_named(self, queue: str, name: str) -> list[dict[str, Any]]:
        """Every job of the queue named ``name`` (a trailing ``*``: named with that prefix), described,
        in any status: ListJobs with a ``JOB_NAME`` filter ignores ``jobStatus`` (AWS Batch API
        reference), and its summaries carry no tags, so the jobs are described too."""
        prefix = name[:-1] if name.endswith("*") else None

        def listed() -> list[str]:
            ids: list[str] = []
            paginator = self.api.get_paginator("list_jobs")
            for page in paginator.paginate(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [name]}]):
                for summary in page.get("jobSummaryList") or []:
                    found = str(summary.get("jobName") or "")
                    if found == name or (prefix is not None and found.startswith(prefix)):  # the filter ignores case
                        ids.append(summary["jobId"])
            return ids

        ids = retry_transient(f"ListJobs {name}", listed, self.log)
        return list(self.describe_jobs_batched(ids).values()) if ids else []

    def _describe_jobs(self, ids: list[str]) -> list[dict[str, Any]]:
        """One DescribeJobs call, tried again with backoff while it fails transiently (throttled, a 5xx,
        a dropped connection) beyond botocore's own attempts."""
        return retry_transient(
            "DescribeJobs", lambda: list(self.api.describe_jobs(jobs=ids)["jobs"]), self.log, THROTTLE_RETRIES
        )

    def queue_offers(self, queue: str) -> QueueOffer:
        """Which capacity and accelerator instance types the queue's compute environments launch."""
        return retry_transient(f"DescribeJobQueues {queue}", lambda: self._queue_offers(queue), self.log)

    def _queue_offers(self, queue: str) -> QueueOffer:
        queues = self.api.describe_job_queues(jobQueues=[queue])["jobQueues"]
        if not queues:
            raise ValueError(f"job queue {queue!r} does not exist")
        arns = [entry["computeEnvironment"] for entry in queues[0]["computeEnvironmentOrder"]]
        environments = self.api.describe_compute_environments(computeEnvironments=arns)["computeEnvironments"]
        kinds = {(e.get("computeResources") or {}).get("type", "EC2") for e in environments}
        capacity = "spot" if kinds <= SPOT_TYPES else "on-demand" if not kinds & SPOT_TYPES else "mixed"
        types = [t for e in environments for t in (e.get("computeResources") or {}).get("instanceTypes") or []]
        offers = instance_offers(types)
        unmanaged = [
            f"{e['computeEnvironmentName']} (UNMANAGED)"
            for e in environments
            if e.get("type") == "UNMANAGED" or not (e.get("computeResources") or {}).get("instanceTypes")
        ]
        fargate = bool(kinds & {"FARGATE", "FARGATE_SPOT"})
        unknown = (*unmanaged, *unreadable_types(types, offers))
        return QueueOffer(queues[0]["jobQueueName"], capacity, offers, unknown, fargate=fargate)

    # --- logs -----------------------------------------------------------------------------

    #: Where a job's logs are (``utils.batch_logs``): its group, and each attempt's stream.
    log_group = staticmethod(log_group)
    attempt_streams = staticmethod(attempt_streams)

    def logs_client(self, job: Mapping[str, Any]) -> Any:
        """A CloudWatch Logs client for the job's log region, with this hook's credentials and retries."""
        options = ((job.get("container") or {}).get("logConfiguration") or {}).get("options") or {}
        region = options.get("awslogs-region") or self.conn_region_name
        with self._session_lock:  # ``get_client_type`` says why
            return self.get_session(region_name=region).client(
                "logs",
                region_name=region,
                endpoint_url=self.conn_config.get_service_endpoint_url("logs"),
                config=self.config,
                verify=self.verify,
            )

    def attempt_lines(self, job: Mapping[str, Any], limit: int = 10_000) -> list[str]:
        """Every attempt's log lines, oldest attempt first (the last ``limit`` of each), read with this
        hook's credentials: a trigger's hook has its connection already (``for_trigger``)."""
        group = self.log_group(job)
        if group is None:
            return []
        logs = self.logs_client(job)
        lines: list[str] = []
        for stream in self.attempt_streams(job):
            read: list[str] = []
            token: str | None = None
            while True:  # oldest first; the same token back means the end of the stream
                ask = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
                if token:
                    ask["nextToken"] = token
                page = retry_transient(f"GetLogEvents {stream}", partial(logs.get_log_events, **ask), self.log)
                read = (read + [line for e in page["events"] for line in str(e["message"]).splitlines()])[-limit:]
                if not page["events"] or page.get("nextForwardToken") in (None, token):
                    break
                token = page["nextForwardToken"]
            lines += read
        return lines

    def read_output(
        self, job: Mapping[str, Any], wait: float, *, result: bool = True, profile: bool = False, poll: float = 1.0
    ) -> WorkloadOutput:
        """The result line and the GPU profile the job's final attempt printed.

        CloudWatch makes events readable seconds after they were written, so a job may be
        SUCCEEDED before its last lines can be read: they are waited for up to ``wait`` seconds,
        reading the newest events of the stream (one GetLogEvents a poll: the API is throttled per
        account). The wait ends once what is wanted is read: the profile, which the profiler prints
        last (so the lines before it are in too), or else the result line. A stream that does not
        exist yet is "not yet"; any other error is logged and tried again until ``wait`` has passed.
        A job without awslogs or without a stream has neither. ``unread`` says why the log could not
        be read, when it could not.
        """
        from botocore.exceptions import ClientError

        if not (result or profile):
            return WorkloadOutput()
        group, streams = self.log_group(job), self.attempt_streams(job)
        if group is None:
            return WorkloadOutput(unread="the job does not log to CloudWatch Logs (its logDriver is not awslogs)")
        if not streams:
            return WorkloadOutput(unread="its attempt has no log stream")
        logs = self.logs_client(job)
        deadline = time.monotonic() + wait
        while True:
            where = f"{group}/{streams[-1]}"
            try:
                events = retry_transient(
                    f"GetLogEvents {where}",
                    lambda: logs.get_log_events(logGroupName=group, logStreamName=streams[-1], startFromHead=False),
                    self.log,
                )
                # One event may hold several lines (awslogs-multiline-pattern, awslogs-datetime-format).
                output = read_output(line for e in events["events"] for line in str(e["message"]).splitlines())
            except ClientError as error:  # not there yet; denied or throttled: the output is lost, not the job
                code = error.response.get("Error", {}).get("Code")
                if code != "ResourceNotFoundException":
                    self.log.info("Reading %s: %s", where, error)
                said = f"log stream {where} does not exist" if code == "ResourceNotFoundException" else str(error)
                output = WorkloadOutput(unread=f"{said}, after log_lag={wait:g}s")
            except Exception as error:  # a timeout or a dropped connection (botocore): the same
                self.log.info("Reading %s: %s: %s", where, type(error).__name__, error)
                output = WorkloadOutput(unread=f"{where}: {type(error).__name__}: {error}, after log_lag={wait:g}s")
            if output.profile is not None if profile else output.result_found:
                return output
            if time.monotonic() >= deadline:
                return output  # the caller says what is missing, once
            time.sleep(min(poll, max(deadline - time.monotonic(), 0)))

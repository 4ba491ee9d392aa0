"""SubmitJob at most once per task try: a lost answer is looked up before a resend, and a duplicate is stopped.

Batch has no idempotency token for SubmitJob. A throttle (or a connection never made) means Batch
did not act: the job is sent again after a pause. A 5xx, or a connection dropped while waiting for
the answer, may come after Batch created the job: before sending it again, the job is looked for
by its name (ListJobs with a ``JOB_NAME`` filter, then DescribeJobs for its tags), and ``keep``
picks this task try's job among those found.

ListJobs is eventually consistent: a job just created may be missing from it for a while (the AWS
Batch API reference gives no bound). A look-up of three reads two seconds apart missed a job
listed later, and the task ran two GPU jobs for one try. So the look-up lasts ``LOOKUP_WINDOW``
seconds of pauses, growing from ``LOOKUP_FIRST_WAIT`` to ``LOOKUP_MAX_WAIT`` (1, 2, 4, 8, 15, 15
and 15 s: eight reads over a minute), before the job is sent again. Past that window a listing may
still be late: a job sent again after a possibly lost answer is ``Submitted.resent``, and whoever
follows it (the operator's wait, the trigger) looks for this try's jobs of that name for a while
longer and keeps the first created, terminating any other (``stop_duplicates``).

The hook's calls (ListJobs, DescribeJobs, TerminateJob, SubmitJob on its no-retry client) are
``GPUBatchHook``'s; this module only decides when to make them, so it imports no AWS SDK itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_gpu.utils import batch_retries

#: SubmitJob sends (each once: botocore does not retry it) before a transient error is raised; with
#: ``batch_retries.pause`` between them (up to a minute each), a 10-minute outage is waited out.
SUBMIT_ATTEMPTS = 16
#: Seconds of pauses between the ListJobs reads that look for a job whose SubmitJob answer may have
#: been lost, before it is sent again; the pauses grow from the first to the longest.
LOOKUP_WINDOW, LOOKUP_FIRST_WAIT, LOOKUP_MAX_WAIT = 60.0, 1.0, 15.0
#: Seconds after a job was sent again past the look-up (``Submitted.resent``) during which its follower
#: looks for a first job of the try listed late, and reads spent on it at most every ``DUPLICATE_CHECK``.
DUPLICATE_WATCH, DUPLICATE_CHECK = 2 * LOOKUP_WINDOW, 5.0
#: TerminateJob's reason for a second job of one task try (a listing later than the look-up).
DUPLICATE_REASON = "airflow-gpu: a duplicate submission of this task try's job (its first submission was listed late)"

Jobs = Sequence[Mapping[str, Any]]
Keep = Callable[[Jobs], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Submitted:
    """The job a ``submit_job_once`` left this try with."""

    job_id: str
    #: Found already submitted (its answer was lost), not sent by this call.
    adopted: bool = False
    #: Sent again after an answer that may have been lost, which the look-up did not find: a first job
    #: may yet show up in ListJobs, and the follower stops it or this one (``stop_duplicates``).
    resent: bool = False


def watch_rounds(interval: float) -> int:
    """Polling rounds of ``interval`` seconds that cover ``DUPLICATE_WATCH``."""
    return max(1, math.ceil(DUPLICATE_WATCH / max(float(interval), DUPLICATE_CHECK)))


def lookup_waits(window: float | None = None) -> list[float]:
    """The pauses before each ListJobs read after the first: doubling from ``LOOKUP_FIRST_WAIT`` up to
    ``LOOKUP_MAX_WAIT``, summing to ``window`` (``LOOKUP_WINDOW``)."""
    left, wait, waits = LOOKUP_WINDOW if window is None else window, LOOKUP_FIRST_WAIT, []
    while left > 1e-9:
        waits.append(min(wait, LOOKUP_MAX_WAIT, left))
        left -= waits[-1]
        wait *= 2
    return waits


def submit_job_once(hook: Any, args: Mapping[str, Any], keep: Keep) -> Submitted:
    """SubmitJob through ``hook`` (a ``GPUBatchHook``), never twice for one job of this task try."""
    maybe_submitted = False
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        if maybe_submitted:
            found = find_submitted(hook, args, keep)
            if found is not None:
                hook.log.info("Job %s (%s) was submitted before its answer was lost", found, args["jobName"])
                return Submitted(found, adopted=True)
        try:
            return Submitted(str(hook._submit_api.submit_job(**args)["jobId"]), resent=maybe_submitted)
        except Exception as error:
            if attempt == SUBMIT_ATTEMPTS or not batch_retries.transient(error):
                raise
            maybe_submitted = maybe_submitted or not batch_retries.throttled(error)
            wait = batch_retries.pause(attempt)
            hook.log.warning(
                "SubmitJob %s failed transiently (%s: %s); %s in %.1f s", args["jobName"], type(error).__name__,
                error, "looking for it, then submitting it again" if maybe_submitted else "trying again", wait,
            )  # fmt: skip
            batch_retries.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def find_submitted(hook: Any, args: Mapping[str, Any], keep: Keep) -> str | None:
    """This try's job named as ``args`` says, read from ListJobs over ``LOOKUP_WINDOW``; None if never listed."""
    queue, name = str(args["jobQueue"]), str(args["jobName"])
    for wait in [0.0, *lookup_waits()]:
        if wait:
            batch_retries.sleep(wait)
        kept = keep(hook.jobs_named(queue, name))
        if kept is not None:
            return str(kept["jobId"])
    hook.log.warning(
        "Job %s was not listed in queue %s within %.0f s of its lost answer: submitting it again", name, queue,
        LOOKUP_WINDOW,
    )  # fmt: skip
    return None


def stop_duplicates(
    hook: Any,
    queue: str,
    name: str,
    keep: Keep,
    ours: Callable[[Mapping[str, Any]], bool],
    final: frozenset[str] | tuple[str, ...],
    reason: str = DUPLICATE_REASON,
) -> str | None:
    """The first-created of this try's jobs named ``name`` (``keep``), every other live one of the try
    (``ours``, not in ``final``) terminated with a log line; None when none of the try is listed."""
    jobs = hook.jobs_named(queue, name)
    kept = keep(jobs)
    if kept is None:
        return None
    for job in jobs:
        if job["jobId"] != kept["jobId"] and ours(job) and job["status"] not in final:
            hook.log.warning(
                "Terminating job %s (%s): a second job of this task try; job %s, created first, is kept",
                job["jobId"], name, kept["jobId"],
            )  # fmt: skip
            hook.terminate(str(job["jobId"]), reason)
    return str(kept["jobId"])

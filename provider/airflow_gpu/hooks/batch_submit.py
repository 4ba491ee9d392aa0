"""SubmitJob at most once per task try: a lost answer is looked up before a resend, and a duplicate is stopped.

Batch has no idempotency token for SubmitJob. A throttle (or a connection never made) means Batch
did not act: the job is sent again after a pause. A 5xx, or a connection dropped while waiting for
the answer, may come after Batch created the job: before sending it again, the job is looked for
by its name (ListJobs with a ``JOB_NAME`` filter, then DescribeJobs for its tags), and ``keep``
picks this task try's job among those found. A look-up follows only the send that may have been
acted on: once a look-up found nothing, a throttled resend is paused and sent again, not looked
up for another minute (the soak met a 5xx then five throttles: six minutes of look-ups for one
job, and the task's run past its bound); the job stays ``Submitted.resent`` for its follower.

ListJobs is eventually consistent: a job just created may be missing from it for a while (the AWS
Batch API reference gives no bound). A look-up of three reads two seconds apart missed a job
listed later, and the task ran two GPU jobs for one try. So the look-up lasts ``LOOKUP_WINDOW``
seconds of pauses, growing from ``LOOKUP_FIRST_WAIT`` to ``LOOKUP_MAX_WAIT`` (1, 2, 4, 8, 15, 15
and 15 s: eight reads over a minute), before the job is sent again. Past that window a listing may
still be late: a job sent again after a possibly lost answer is ``Submitted.resent``, and whoever
follows it (the operator's wait, the trigger) looks for this try's jobs of that name for a while
longer and keeps the first created, terminating any other (``stop_duplicates``).

A submission can outlive its task: Mark Failed while SubmitJob is in flight (in the trigger's thread,
or on the worker, whose ``on_kill`` runs while ``execute`` submits) found no job id to terminate, and
the job SubmitJob created afterwards ran on, billed. ``stop`` (whether the task was killed) is read
before every SubmitJob, during the pauses between tries, and right after SubmitJob answers: once
killed, nothing more is sent, and a job the submission created or found is terminated at once with
``KILLED_REASON`` (``withdraw``); ``Withdrawn`` tells the caller. A look-up after a lost answer still
runs its window when killed, to find and terminate the job that answer may have created.

The hook's calls (ListJobs, DescribeJobs, TerminateJob, SubmitJob on its no-retry client) are
``GPUBatchHook``'s; this module only decides when to make them, so it imports no AWS SDK itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from airflow_gpu.spot.batch import KILLED
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

#: TerminateJob's reason for a job of a submission that answered after its task was killed: a ``KILLED``
#: reason, so that no later try takes the job over.
KILLED_REASON = f"{KILLED[0]} (its SubmitJob was still in flight while the task was being killed)"
#: The longest stretch of a pause between SubmitJob tries before ``stop`` is read again, seconds.
STOP_CHECK = 2.0

Jobs = Sequence[Mapping[str, Any]]
Keep = Callable[[Jobs], Mapping[str, Any] | None]
#: Whether the submission's task was killed (read from the submitting thread).
Stop = Callable[[], bool]


class Left(Exception):
    """The submitting try can no longer act for its task (its supervisor died: ``leave()``): nothing more is
    sent, and ``job_id``, the job the submission created or found meanwhile (None: none), is left as it is,
    to the try's own handling of work it leaves (the retry may take it over), not terminated."""

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id
        super().__init__(f"the submitting try can no longer act; job {job_id or '(none)'} is left as it is")


class Withdrawn(Exception):
    """The task was killed while its job was being submitted: nothing more was sent. ``job_id``: the job
    the submission created or found meanwhile, if any; ``terminated`` when its TerminateJob went through."""

    def __init__(self, queue: str, name: str, job_id: str | None = None, terminated: bool = False) -> None:
        self.queue, self.name, self.job_id, self.terminated = queue, name, job_id, terminated
        if job_id is None:
            outcome = "no job was created"
        else:
            outcome = f"its job {job_id} was {'terminated' if terminated else 'NOT terminated: it runs on'}"
        super().__init__(f"the task was killed while job {name} was being submitted to queue {queue}; {outcome}")


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


def submit_job_once(
    hook: Any,
    args: Mapping[str, Any],
    keep: Keep,
    stop: Stop | None = None,
    log: Any = None,
    leave: Stop | None = None,
) -> Submitted:
    """SubmitJob through ``hook`` (a ``GPUBatchHook``), never twice for one job of this task try, and never
    once ``stop()`` says the task was killed (``Withdrawn``; see the module's docstring), nor once ``leave()``
    says the try can no longer act (``Left``: a job found or created is left as it is, not terminated).
    ``log``: where the submission is told (the hook's by default; a trigger's goes to the task's log)."""
    log = hook.log if log is None else log
    killed: Stop = stop if stop is not None else _never
    gone: Stop = leave if leave is not None else _never
    waits = stop is not None or leave is not None
    pause: Callable[[float], None] = (
        (lambda seconds: _pause(seconds, lambda: killed() or gone())) if waits else batch_retries.sleep
    )
    maybe_submitted = False  # the last send may have created the job: look for it before the next
    resent = False  # an earlier send may have created a job that its look-up did not find (listed late)
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        if maybe_submitted:
            found = find_submitted(hook, args, keep, killed, log)
            if found is not None:
                if gone():
                    raise Left(found)
                if killed():
                    withdraw(hook, args, found, log)
                log.info("Job %s (%s) was submitted before its answer was lost", found, args["jobName"])
                return Submitted(found, adopted=True)
            maybe_submitted, resent = False, True
        if gone():
            raise Left(None)
        if killed():
            log.warning(
                "The task was killed before job %s was %ssubmitted to queue %s: it is not sent",
                args["jobName"], "again " if attempt > 1 else "", args["jobQueue"],
            )  # fmt: skip
            raise Withdrawn(str(args["jobQueue"]), str(args["jobName"]))
        try:
            job_id = str(hook._submit_api.submit_job(**args)["jobId"])
        except Exception as error:
            if attempt == SUBMIT_ATTEMPTS or not batch_retries.transient(error):
                raise
            maybe_submitted = not batch_retries.throttled(error)
            wait = batch_retries.pause(attempt)
            log.warning(
                "SubmitJob %s failed transiently (%s: %s); %s in %.1f s", args["jobName"], type(error).__name__,
                error, "looking for it, then submitting it again" if maybe_submitted else "trying again", wait,
            )  # fmt: skip
            pause(wait)
            continue
        if gone():  # its supervisor died while SubmitJob was in flight: the job is left as the try leaves work
            raise Left(job_id)
        if killed():  # it answered after the kill, whose TerminateJobs did not know this job
            withdraw(hook, args, job_id, log)
        return Submitted(job_id, resent=resent)
    raise AssertionError("unreachable")  # pragma: no cover


def withdraw(hook: Any, args: Mapping[str, Any], job_id: str, log: Any) -> NoReturn:
    """Terminate ``job_id``, this try's job that a submission created (or found) once its task was killed,
    with ``KILLED_REASON`` (once; ``GPUBatchHook.terminate`` rides out transient errors), and raise
    ``Withdrawn`` saying whether it went through."""
    queue, name = str(args["jobQueue"]), str(args["jobName"])
    log.warning(
        "Job %s (%s, queue %s) was submitted while the task was being killed: terminating it", job_id, name, queue
    )
    try:
        hook.terminate(job_id, KILLED_REASON)
    except Exception as error:
        log.error(
            "Could not terminate job %s (%s, queue %s), submitted while the task was being killed: it runs on. "
            "Stop it by hand (%s: %s)", job_id, name, queue, type(error).__name__, error,
        )  # fmt: skip
        raise Withdrawn(queue, name, job_id) from error
    log.info("Terminated job %s (%s): the task was killed while it was being submitted", job_id, name)
    raise Withdrawn(queue, name, job_id, terminated=True)


def find_submitted(
    hook: Any, args: Mapping[str, Any], keep: Keep, stop: Stop | None = None, log: Any = None
) -> str | None:
    """This try's job named as ``args`` says, read from ListJobs over ``LOOKUP_WINDOW``; None if never listed.
    The whole window is read even once ``stop()`` (a killed task): the job found is then terminated."""
    log = hook.log if log is None else log
    queue, name = str(args["jobQueue"]), str(args["jobName"])
    for wait in [0.0, *lookup_waits()]:
        if wait:
            batch_retries.sleep(wait)
        kept = keep(hook.jobs_named(queue, name))
        if kept is not None:
            return str(kept["jobId"])
    if stop is not None and stop():
        log.warning(
            "Job %s was not listed in queue %s within %.0f s of its lost answer; the task was killed, so it is not "
            "sent again. If Batch lists it later, terminate it by hand", name, queue, LOOKUP_WINDOW,
        )  # fmt: skip
        return None
    log.warning(
        "Job %s was not listed in queue %s within %.0f s of its lost answer: submitting it again", name, queue,
        LOOKUP_WINDOW,
    )  # fmt: skip
    return None


def _never() -> bool:
    return False


def _pause(seconds: float, stop: Stop) -> None:
    """``batch_retries.sleep`` for ``seconds``, in stretches of at most ``STOP_CHECK``, ended early once ``stop()``."""
    stretches = max(1, math.ceil(seconds / STOP_CHECK))
    for _ in range(stretches):
        if stop():
            return
        batch_retries.sleep(seconds / stretches)


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

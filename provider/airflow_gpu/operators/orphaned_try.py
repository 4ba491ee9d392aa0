"""A try whose Airflow task supervisor died, while the task process lives on.

Airflow's supervisor forks the task process and reads its logs through a pipe; nothing ends the task
when the supervisor is killed (SIGKILL, the OOM killer), so the task goes on until its next log line
fails with a broken pipe. On the way out KPO's cleanup then labelled the running pod
``already_checked`` and tried to delete it, and its own log line failed before the delete: the pod
ran on, and the retry, which skips a checked pod, ran the workload again beside it (the soak, seed 9).

Such a try can no longer tell Airflow anything, and must not act any more: a reclaim it saw would make it
create a replacement beside the retry's (the fourth soak: two replacement training Jobs of one sync try, made
after its task was marked success). Its waits stop (``OrphanedTry``, raised where they poll), and then:

* When no retry will take the work over (the operator asks ``retry_handover.why_no_takeover``: reattach on,
  a try left, no retry policy), it deletes the work, quietly, so that nothing runs on for nobody.
* When a retry may, it leaves the work to it, and stays to watch (``linger``): the retry that takes the work
  over writes ``TAKEN_ANNOTATION`` on it (the try's task instance id, so a resumed process of the same try
  knows its own), and the orphan leaves. Nobody may come: a person marked the task success or failed after
  the worker died (the fourth soak's live orphan, a Pending Job), and Airflow starts no retry. Past
  ``patience``, the time Airflow takes to notice the dead worker and start the retry, plus a margin, the
  orphan deletes the work that has not started (pods still Pending: nothing is lost). Work that runs is
  left to ``airflow-gpu reap``, which asks Airflow first: a retry only late (a full queue, a long backoff)
  would otherwise lose hours of training. Work that ended (a pod that succeeded, held for its end to be
  read) stays for a retry to read and for the reaper.

Its own API calls go through a logger that writes nothing (``SILENT``): every log line of an orphan fails
on the broken pipe, and a retry helper that logs its first transient error would give up there.

The supervisor is the task process's parent (a plain fork under every executor); a run with no
supervisor (``dag.test()``, ``airflow tasks test``: in process) is never judged orphaned.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from airflow_gpu.utils import end_hold

#: Written on a pod or training Job (an annotation), or a Batch job (a tag), by the try that takes it over from
#: an earlier one: the orphan that made it sees the work is followed again and leaves it (``linger``).
TAKEN_ANNOTATION = "airflow-gpu/taken-over-by"

#: Seconds on top of Airflow's own times (``patience``) for the retry to be queued, started and to reach the work.
MARGIN_SECONDS = 120.0

#: Seconds between two looks of a lingering orphan at the work it left.
LOOK_SECONDS = 5.0

#: Seconds one look may take: a half-open connection must not hang the orphan for ever.
LOOK_TIMEOUT_SECONDS = 15.0

#: Seconds between two checks for a dead supervisor while a pod's log is followed (``WatchedLogs``).
FOLLOW_CHECK_SECONDS = 1.0

#: The supervisor noted by a process that was orphaned before it started (``remember``): no process's parent.
ORPHANED_AT_START = -1

#: What an orphan's own calls log to: nothing (its task log is a broken pipe).
SILENT = logging.getLogger("airflow_gpu.orphaned_try.silent")
SILENT.addHandler(logging.NullHandler())
SILENT.propagate = False


class OrphanedTry(Exception):
    """Raised in a wait of a try whose supervisor died: nothing it does from here on reaches Airflow."""

    def __init__(self) -> None:
        super().__init__("the task's supervisor (Airflow's worker process) is gone; this try stops acting")


def remember(op: Any, context: Any = None) -> None:
    """Note this process's supervisor, where it has one, as the try starts or resumes; and the try's identity,
    which it writes on work it takes over (``TAKEN_ANNOTATION``): the task instance's id, one per try in
    Airflow 3, the same in each process of the try (a resume after a deferral)."""
    from airflow_gpu.utils.supervision import supervised

    parent = os.getppid()
    # A parent of 1 that is not Airflow is init's: the supervisor died before this process could note it (the
    # twenty-fourth soak killed a worker in a resume's first second), and noting init would never judge this try
    # orphaned. Airflow as pid 1 (a KubernetesExecutor pod with no init) is the supervisor itself.
    op._supervisor = (ORPHANED_AT_START if parent == 1 and not _airflow_is_init() else parent) if supervised() else None
    ti = context.get("ti") if isinstance(context, Mapping) else None
    if ti is not None and getattr(ti, "id", None):
        op._taker = f"{ti.id}"
    elif not getattr(op, "_taker", None):
        op._taker = uuid.uuid4().hex
    op._orphan_context = context if context is not None else getattr(op, "_orphan_context", None)


def _airflow_is_init() -> bool:
    """Whether pid 1 runs Airflow (or cannot be read: then it is taken for the supervisor, as before)."""
    from pathlib import Path

    try:
        return b"airflow" in Path("/proc/1/cmdline").read_bytes()
    except OSError:
        return True


def orphaned(op: Any) -> bool:
    """The supervisor noted at the start is no longer this process's parent."""
    supervisor = getattr(op, "_supervisor", None)
    return supervisor is not None and os.getppid() != supervisor


def stop_if_orphaned(op: Any) -> None:
    """Raise ``OrphanedTry`` where a wait polls, once the supervisor is gone."""
    if orphaned(op):
        raise OrphanedTry()


class WatchedLogs:
    """A followed log (KPO's ``PodLogsConsumer``) whose response is shut once ``stop`` raises.

    KPO follows a pod's log with a read timeout of five minutes, and looks at the pod only between chunks
    of output or when that read times out: a try that loses its supervisor while it follows a silent pod
    (a training between epochs, a job that logs nothing) would notice only minutes later, the pod (a GPU)
    running on for nobody meanwhile. A thread asks ``stop`` every ``FOLLOW_CHECK_SECONDS`` while the log is
    read; once it raises, it shuts the response (urllib3's ``shutdown``, which ends a read blocked in
    another thread), KPO's read ends with an ``HTTPError``, and KPO's next read of the pod raises
    ``OrphanedTry`` where every wait does. Only KPO iterates what ``read_pod_logs`` returns."""

    def __init__(self, consumer: Any, stop: Callable[[], None], every: float = FOLLOW_CHECK_SECONDS) -> None:
        self.consumer, self.stop, self.every = consumer, stop, every
        self.shut = False

    def __iter__(self) -> Iterator[bytes]:
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), name="airflow-gpu-log-watch", daemon=True)
        watcher.start()
        try:
            items: Iterable[bytes] = self.consumer
            yield from items
        finally:
            done.set()

    def _watch(self, done: threading.Event) -> None:
        while not done.wait(self.every):
            try:
                self.stop()
            except Exception:
                # ``shutdown`` (urllib3 2.3, the floor of the ``kubernetes`` extra) ends the blocked read; without
                # it nothing is done: ``release_conn`` would not end the read and would hand the still-streaming
                # socket back to the pool for the next request. Behind an HTTPS proxy urllib3 cannot shut the
                # socket (``ValueError``): KPO's own read timeout is the bound there, as before.
                with contextlib.suppress(Exception):
                    self.consumer.response.shutdown()
                    self.shut = True
                return

    def __getattr__(self, name: str) -> Any:
        if name == "consumer":  # not set yet (a copy being made): no recursion through ``self.consumer``
            raise AttributeError(name)
        return getattr(self.consumer, name)


def take_over_mark(op: Any) -> dict[str, Any]:
    """The metadata patch a try writes on the work it takes over (a pod's or a Job's)."""
    return {"metadata": {"annotations": {TAKEN_ANNOTATION: str(getattr(op, "_taker", "") or "unknown")}}}


def mark_taken(op: Any, pod: Any) -> None:
    """Write this try's mark on a pod it reattached to (made by another try), asked again through throttles and
    5xx. Unmarked, an orphan that made it would take it for abandoned; it deletes only work that never started,
    so what is at stake is the reattached pod's wait for a node, which the task log says at ERROR."""
    from airflow_gpu.utils.api_retry import call

    name, namespace = pod.metadata.name, pod.metadata.namespace
    try:
        call(lambda: op.client.patch_namespaced_pod(name, namespace, take_over_mark(op)),
             f"marking pod {namespace}/{name} as taken over", log=op.log)  # fmt: skip
    except Exception as error:
        op.log.error("Could not mark pod %s as taken over by this try (%s): if the try that made it lives on "
                     "orphaned, it deletes the pod should it still be Pending", name, error)  # fmt: skip


def taken_by_another(op: Any, metadata: Mapping[str, Any] | None) -> bool:
    """A later try took the work over: its mark is there and is not this try's."""
    mark = ((metadata or {}).get("annotations") or {}).get(TAKEN_ANNOTATION)
    return bool(mark) and mark != getattr(op, "_taker", None)


def patience(op: Any, context: Any) -> float:
    """Seconds an orphan waits for the work's new follower: Airflow's time to notice the dead worker
    (``[scheduler] task_instance_heartbeat_timeout`` and its detection interval), the task's retry delay, and
    ``MARGIN_SECONDS``; ``[gpu] orphaned_try_patience_seconds`` sets it outright."""
    from airflow.providers.common.compat.sdk import conf

    if fixed := conf.get("gpu", "orphaned_try_patience_seconds", fallback=None):
        return max(0.0, float(fixed))
    heartbeat = conf.getfloat("scheduler", "task_instance_heartbeat_timeout", fallback=300.0)
    detection = conf.getfloat("scheduler", "task_instance_heartbeat_timeout_detection_interval", fallback=10.0)
    return float(heartbeat) + float(detection) + retry_delay_bound(op, context) + MARGIN_SECONDS


def retry_delay_bound(op: Any, context: Any) -> float:
    """The longest Airflow waits before this try's retry (``TaskInstance.next_retry_datetime``): the retry delay,
    or with ``retry_exponential_backoff`` (a multiplier) up to twice ``retry_delay * m ** (try - 1)``, within
    ``max_retry_delay`` and ``[core] max_task_retry_delay``."""
    from airflow.providers.common.compat.sdk import conf

    delay = getattr(op, "retry_delay", None)
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay or 0)
    multiplier = float(getattr(op, "retry_exponential_backoff", 0) or 0)
    if multiplier > 0 and multiplier != 1.0:
        ti = context.get("ti") if isinstance(context, Mapping) else None
        tries = max(0, int(getattr(ti, "try_number", 1) or 1) - 1)
        try:
            seconds = 2 * max(1.0, seconds * multiplier**tries)
        except OverflowError:
            seconds = float("inf")
        seconds = min(seconds, float(conf.getint("core", "max_task_retry_delay", fallback=24 * 60 * 60)))
        cap = getattr(op, "max_retry_delay", None)
        if isinstance(cap, timedelta):
            seconds = min(seconds, cap.total_seconds())
    return seconds


def linger(
    op: Any,
    context: Any,
    look: Callable[[], Mapping[str, Any] | None],
    live: Callable[[Mapping[str, Any]], bool],
    delete: Callable[[], None],
    started: Callable[[Mapping[str, Any]], bool] = lambda work: False,
    marks: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] = lambda work: work.get("metadata"),
) -> str:
    """Watch the work left to a retry until a new follower takes it over, it ends or goes, or ``patience`` runs
    out: then delete it if it never ``started`` (else it is the reaper's: see the module). ``look`` reads it
    (None: gone); a failed look is asked again, and the last one read decides at the end (none read: deleted,
    nothing being known to run). ``marks`` finds the metadata a taking try writes ``TAKEN_ANNOTATION`` in (a
    pod's or a Job's; a Batch job's tags, as annotations). Returns what happened; no log line (they fail here)."""
    deadline = time.monotonic() + patience(op, context)
    known: Mapping[str, Any] = {}
    while True:
        try:
            work = look()
        except Exception:  # the API: look again, and still decide in time
            work = {}
        if work is None:
            return "gone"
        known = work or known
        if work and taken_by_another(op, marks(work)):
            return "taken over"
        if work and not live(work):
            return "ended"
        if time.monotonic() >= deadline:
            if known and started(known):
                return "left running"
            with contextlib.suppress(Exception):
                delete()
            return "deleted"
        time.sleep(LOOK_SECONDS)


def settle(op: Any, pod: Any, taken_over: bool, context: Any = None) -> None:
    """Leave ``pod`` to the retry that will take it over (``taken_over``), watching that one does (``linger``),
    else delete it; no log line (they fail here)."""
    if pod is None:
        return
    name, namespace = pod.metadata.name, pod.metadata.namespace

    def delete() -> None:
        with contextlib.suppress(Exception):
            op.client.delete_namespaced_pod(name, namespace, grace_period_seconds=op.termination_grace_period)
        end_hold.release_quietly(op.client, name, namespace, SILENT)

    if not taken_over:
        return delete()

    def look() -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        from airflow_gpu.utils.kubernetes import to_dict

        try:
            read = op.client.read_namespaced_pod(name, namespace, _request_timeout=LOOK_TIMEOUT_SECONDS)
            pod: Mapping[str, Any] = to_dict(read)
            return pod
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    linger(op, context, look, _pod_live, delete, started=_pod_started)
    return None


def stop_job(op: Any, context: Any, job_id: str) -> str:
    """An AWS Batch job (``GPUBatchOperator``): on the task's last try terminated, nobody would read it; else
    left to the retry that takes it over (its saved state) and watched (``linger``) as a pod is: the retry tags
    it (``mark_job_taken``). A job no retry came for (the task marked success or failed after the worker died)
    is cancelled past the patience if it never ran (SUBMITTED to RUNNABLE, no attempt: nothing lost): CancelJob
    leaves a job that started meanwhile alone, for ``airflow-gpu reap``, as it leaves one that runs. The mark is
    asked of ``ListTagsForResource`` first, the tags' own read. Its calls are the bare client's: the hook's log
    lines fail here."""
    from airflow_gpu.spot.batch import FINAL, KILLED, ORPHAN_CANCEL_PREFIX

    ti = context["ti"]
    api = op.gpu_hook.api
    if int(ti.try_number) > int(getattr(ti, "max_tries", 0) or 0):  # as ``_stop_unless_taken_over`` judges
        with contextlib.suppress(Exception):
            api.terminate_job(jobId=job_id, reason=f"{KILLED[0]} (the task's supervisor died on its last try)")
        return "terminated"
    arn: list[str] = []

    def look() -> Mapping[str, Any] | None:
        jobs = api.describe_jobs(jobs=[job_id])["jobs"]
        if jobs and jobs[0].get("jobArn"):
            arn[:] = [str(jobs[0]["jobArn"])]
        return jobs[0] if jobs else None  # a job this old is known to DescribeJobs: absent is gone (purged)

    def cancel() -> None:
        if arn and taken_by_another(op, {"annotations": api.list_tags_for_resource(resourceArn=arn[0])["tags"]}):
            return
        api.cancel_job(jobId=job_id, reason=f"{ORPHAN_CANCEL_PREFIX} (the try that made it lost its supervisor)")

    return linger(
        op, context, look, lambda job: job.get("status") not in FINAL, cancel,
        started=lambda job: job.get("status") in ("STARTING", "RUNNING") or bool(job.get("attempts")),
        marks=lambda job: {"annotations": job.get("tags") or {}},
    )  # fmt: skip


def mark_job_taken(op: Any, job: Mapping[str, Any]) -> None:
    """Tag a Batch job this try took over from an earlier one (``TagResource``, granted by the shipped policy), so
    that the try that made it, if it lives on orphaned, leaves it (``stop_job``). Unmarked, it would cancel the
    job should it still wait for an instance past its patience: the task log says so at ERROR."""
    from airflow_gpu.utils.batch_retries import retry_transient

    tags = {TAKEN_ANNOTATION: str(getattr(op, "_taker", "") or "unknown")}
    try:
        retry_transient(f"TagResource {job['jobId']}",
                        lambda: op.gpu_hook.api.tag_resource(resourceArn=job["jobArn"], tags=tags), op.log)  # fmt: skip
    except Exception as error:
        op.log.error("Could not tag job %s as taken over by this try (%s): if the try that made it lives on "
                     "orphaned, it cancels the job should it not have started", job["jobId"], error)  # fmt: skip


def settle_orphaned(op: Any, pod: Any) -> None:
    """``settle`` with the context the try started with, judging itself whether a retry takes the pod over."""
    from airflow_gpu.operators.retry_rule import why_no_takeover

    context = getattr(op, "_orphan_context", None)
    taken_over = context is not None and why_no_takeover(op, context) is None
    settle(op, pod, taken_over, context)


def _pod_started(pod: Mapping[str, Any]) -> bool:
    """Past Pending: its containers run (or ran), work that deleting would throw away."""
    return (pod.get("status") or {}).get("phase") not in (None, "Pending")


def _pod_live(pod: Mapping[str, Any]) -> bool:
    """Not ended, not being deleted: what would run on for nobody."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

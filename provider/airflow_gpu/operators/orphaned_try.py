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
* When a retry may, it leaves the work to it, and stays to watch (``linger``): the retry, or the same try
  sent again by Celery, that takes the work over writes ``TAKEN_ANNOTATION`` on it, and the orphan leaves.
  Nobody may come: a person marked the task success or failed after the worker died (the fourth soak's live
  orphan, a Pending Job), and Airflow starts no retry. Past ``patience``, the time Airflow takes to notice
  the dead worker and start the retry, plus a margin, the orphan deletes the work that still runs, as
  ``airflow-gpu reap`` would. Work that ended (a pod that succeeded, held for its end to be read) stays for
  a retry to read and for the reaper.

The supervisor is the task process's parent (a plain fork under every executor); a run with no
supervisor (``dag.test()``, ``airflow tasks test``: in process) is never judged orphaned.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from airflow_gpu.utils import end_hold

#: Written on a pod or training Job by the try that takes it over from an earlier one: the orphan that
#: made it sees the work is followed again and leaves it (``linger``).
TAKEN_ANNOTATION = "airflow-gpu/taken-over-by"

#: Seconds on top of Airflow's own times (``patience``) for the retry to be queued, started and to reach the work.
MARGIN_SECONDS = 120.0

#: Seconds between two looks of a lingering orphan at the work it left.
LOOK_SECONDS = 5.0


class OrphanedTry(Exception):
    """Raised in a wait of a try whose supervisor died: nothing it does from here on reaches Airflow."""

    def __init__(self) -> None:
        super().__init__("the task's supervisor (Airflow's worker process) is gone; this try stops acting")


def remember(op: Any) -> None:
    """Note this process's supervisor, where it has one, as the try starts or resumes."""
    from airflow_gpu.utils.supervision import supervised

    op._supervisor = os.getppid() if supervised() else None
    op._taker = uuid.uuid4().hex  # what this try writes on work it takes over (``TAKEN_ANNOTATION``)


def orphaned(op: Any) -> bool:
    """The supervisor noted at the start is no longer this process's parent."""
    supervisor = getattr(op, "_supervisor", None)
    return supervisor is not None and os.getppid() != supervisor


def stop_if_orphaned(op: Any) -> None:
    """Raise ``OrphanedTry`` where a wait polls, once the supervisor is gone."""
    if orphaned(op):
        raise OrphanedTry()


def take_over_mark(op: Any) -> dict[str, Any]:
    """The metadata patch a try writes on the work it takes over (a pod's or a Job's)."""
    return {"metadata": {"annotations": {TAKEN_ANNOTATION: str(getattr(op, "_taker", "") or "unknown")}}}


def mark_taken(op: Any, pod: Any) -> None:
    """Write this try's mark on a pod it reattached to (made by another process); a failure costs only that an
    orphan that made it deletes it late (``linger``), never the task."""
    try:
        op.client.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, take_over_mark(op))
    except Exception as error:
        op.log.warning("Could not mark pod %s as taken over by this try (%s)", pod.metadata.name, error)


def taken_by_another(op: Any, metadata: Mapping[str, Any] | None) -> bool:
    """A later try (or the same try sent again) took the work over: its mark is there and is not this try's."""
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
    delay = getattr(op, "retry_delay", None)
    if bool(getattr(op, "retry_exponential_backoff", False)) and getattr(op, "max_retry_delay", None) is not None:
        delay = op.max_retry_delay  # the longest the next delay can be
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay or 0)
    return float(heartbeat) + float(detection) + seconds + MARGIN_SECONDS


def linger(
    op: Any,
    context: Any,
    look: Callable[[], Mapping[str, Any] | None],
    live: Callable[[Mapping[str, Any]], bool],
    delete: Callable[[], None],
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Watch the work left to a retry until a new follower takes it over, it ends or goes, or ``patience`` runs
    out: then delete it. ``look`` reads it (None: gone); a failed look is asked again. Returns what happened;
    no log line (they fail here)."""
    deadline = clock() + patience(op, context)
    while True:
        try:
            work = look()
        except Exception:  # the API: look again, and still delete in time
            work = {}
        if work is None:
            return "gone"
        if work and taken_by_another(op, work.get("metadata")):
            return "taken over"
        if work and not live(work):
            return "ended"
        if clock() >= deadline:
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
        end_hold.release_quietly(op.client, name, namespace, op.log)

    if not taken_over:
        return delete()

    def look() -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        from airflow_gpu.utils.kubernetes import to_dict

        try:
            pod: Mapping[str, Any] = to_dict(op.client.read_namespaced_pod(name, namespace))
            return pod
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    linger(op, context, look, _pod_live, delete)
    return None


def stop_job(op: Any, context: Any, job_id: str) -> None:
    """An AWS Batch job (``GPUBatchOperator``): left to the retry that takes it over (its saved state), else
    terminated. A Batch job carries no mark a taking try could write without another IAM action
    (``batch:TagResource``), so an orphan does not watch it: one left for a retry that never comes (the task
    marked success or failed after the worker died) runs to its end, and ``airflow-gpu reap`` finds it."""
    from airflow_gpu.spot.batch import KILLED

    ti = context["ti"]
    if int(ti.try_number) <= int(getattr(ti, "max_tries", 0) or 0):  # as ``_stop_unless_taken_over`` judges
        return
    with contextlib.suppress(Exception):
        op.gpu_hook.terminate(job_id, f"{KILLED[0]} (the task's supervisor died on its last try)")


def _pod_live(pod: Mapping[str, Any]) -> bool:
    """Not ended, not being deleted: what would run on for nobody."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

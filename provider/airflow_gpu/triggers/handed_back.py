"""The mark a trigger leaves on a workload it hands to the task still running, so that its twin's kill spares it.

With two triggerers a trigger can run on both at once (apache/airflow#37180). When one copy fires,
the task leaves DEFERRED and the other copy is cancelled and killed as after Mark Failed or Clear
(``kill_guard``). A workload that has ended is spared by what it shows (``kill_guard``); one still
running is not, yet the copy may have fired for a reason that leaves it to the resumed task: an
``error`` event (KPO defers again on the same pod; the training operator watches its Job from the
worker) or a ``timeout`` (the resumed task reads the pod's log, then deletes it). The task state
cannot tell that from a Clear, so the copy that fires says so on the workload itself before its
event leaves: an annotation naming its trigger row (``BaseTrigger.trigger_id``, set by the trigger
runner; both copies run the same row). A kill spares a workload marked with its own row only: after
a Clear, or once the resumed task deferred again (a new row), the mark names another row and the
kill goes ahead.

Marking is best effort: an annotation that cannot be written is logged, and the twin's kill then
stops the workload as before. A trigger without a row id (run outside a triggerer) marks nothing.
One window is left: Mark Failed between the mark and the event's arrival drops the event (the task
is no longer deferred) and spares the marked workload in the twin's kill; ``airflow-gpu reap``
finds it once the task has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_gpu.triggers import cluster
from airflow_gpu.utils import retry_deadline

#: The annotation: the id of the trigger row whose event handed the workload to the task.
ANNOTATION = "airflow-gpu/handed-back-by-trigger"
#: Seconds the mark's retries may take before the event goes without it.
MARK_SECONDS = 10.0


def _row(trigger: Any) -> str | None:
    row = getattr(trigger, "trigger_id", None)
    return None if row is None else str(row)


async def mark(trigger: Any, connection: Any, kind: str, namespace: str, name: str) -> None:
    """Annotate ``kind`` ``namespace/name`` with the trigger's row, before its event is yielded."""
    row = _row(trigger)
    if row is None:
        return
    try:  # bounded: an error event may come from an API server in trouble, and must not wait minutes on it
        with retry_deadline.until(MARK_SECONDS):
            await asyncio.wait_for(cluster.annotate(connection, kind, namespace, name, {ANNOTATION: row}),
                                   MARK_SECONDS + 2)  # fmt: skip
    except Exception as error:  # the event goes in any case
        trigger.log.warning(
            "Could not mark %s %s/%s as handed to the task (%s: %s); a twin of this trigger may stop it",
            kind[:-1], namespace, name, type(error).__name__, error,
        )  # fmt: skip


def by_twin(trigger: Any, obj: dict[str, Any] | None) -> bool:
    """Whether ``obj`` was handed to the task by another copy of this same trigger row."""
    row = _row(trigger)
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return row is not None and annotations.get(ANNOTATION) == row

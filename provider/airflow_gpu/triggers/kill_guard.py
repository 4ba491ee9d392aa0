"""Whether a trigger's ``on_kill`` is a person's kill or a trigger moving to another triggerer.

Airflow 3.3 calls ``on_kill`` when a person marks a deferred task failed or success, or clears it,
so that a trigger can stop the work it follows (the official pod trigger deletes its pod). It calls
it too, with the same cancel message, when a triggerer finds that a trigger it runs is no longer
assigned to it (``TriggerRunnerSupervisor.update_triggers``: a triggerer whose heartbeat went
stale comes back after another took its triggers over, apache/airflow#37180). Then the task is
still DEFERRED and another triggerer follows the same pod or job: killing it would fail the task
that the other triggerer is carrying on. A GPU trigger asks for the task's state first and stops
its workload only when the task is no longer deferred, as the official triggers' ``safe_to_cancel``
does for the cleanup path of older Airflow.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

DEFERRED = "deferred"


async def handed_over(trigger: Any) -> bool:
    """True when the trigger's task is still DEFERRED: this ``on_kill`` is a hand-over, not a kill.

    False when the state says otherwise, or cannot be read (then the kill goes ahead: a person's
    Mark Failed must not leave a GPU running, billed).
    """
    from asgiref.sync import sync_to_async

    ti = getattr(trigger, "task_instance", None)
    if ti is None:
        return False
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
        )
    except Exception as error:
        log.warning("Could not read the state of %s (%s: %s); stopping its workload", ti, type(error).__name__, error)
        return False
    # The states endpoint suffixes a mapped task's key with its map index.
    key = f"{ti.task_id}_{ti.map_index}" if ti.map_index is not None and ti.map_index >= 0 else ti.task_id
    state = (states.get(ti.run_id) or {}).get(key)
    if str(getattr(state, "value", state)) == DEFERRED:
        log.warning(
            "%s is still deferred: this trigger moved to another triggerer, which follows its workload; "
            "nothing is stopped",
            ti,
        )
        return True
    return False

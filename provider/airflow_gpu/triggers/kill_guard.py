"""Whether a trigger's ``on_kill`` is a person's kill or a trigger moving to another triggerer.

In Airflow 3.3 (``airflow/jobs/triggerer_job_runner.py``) the trigger runner's ``cancel_triggers``
cancels every trigger its supervisor queued with ``_USER_ACTION_CANCEL_MSG``, and ``run_trigger``
calls ``on_kill`` for a trigger cancelled with that message (within ``[triggerer] on_kill_timeout``,
30 s). The supervisor queues a trigger (``TriggerRunnerSupervisor.update_triggers``:
``running_triggers - requested_trigger_ids``) whenever the database no longer assigns it to this
triggerer. That is so when a person marks the deferred task failed or success, or clears it; and it
is so as well when another triggerer has taken this one's triggers over (its heartbeat went stale,
then it came back): the task is still DEFERRED and the other triggerer follows the same pod or
job. Stopping the workload then would fail the task that the other triggerer is carrying on. So a
GPU trigger asks for the task's state first and stops its workload only when the task is no longer
deferred.

A state that is not DEFERRED is not always a person's kill either. When one of two copies of a
trigger fires (apache/airflow#37180: both run for a while), ``Trigger.submit_event``
(``airflow/models/trigger.py``) moves the task to SCHEDULED, then it is QUEUED and RUNNING on a
worker that reads the result, and ``Trigger.clean_unused`` deletes the trigger row: the other
triggerer's supervisor no longer has it assigned, and its copy is cancelled with
``_USER_ACTION_CANCEL_MSG`` and killed, reading one of those states. So the kill itself spares what
has ended: a pod whose base container has terminated (``kill_spare.pod_ended``), a
training Job its controller has judged complete or failed (``spot.training_job.judged``). Those bill
nothing, and their logs, result and profile are the resumed task's to read and delete; each is read
before its delete, through the retrying API path, within the kill's budget (``kill_tasks``). An AWS
Batch job needs nothing of the kind: TerminateJob acts only on a job not yet SUCCEEDED or FAILED. A
workload still running is stopped (Mark Failed, Clear), unless the copy that fired marked it as
handed to the task with its trigger row (``handed_back``: a ``timeout`` or ``error`` event, after
which the resumed task deletes the pod itself, or goes on following it: KPO defers again, the
training operator watches its Job from the worker); the state endpoint alone cannot tell that from
a Clear. A Batch job has no such mark yet: after a copy's ``error`` event (the worker looks again and
defers again) its twin's kill terminates the running job.

When the state cannot be read, even on a second try, ``on_kill`` (Airflow 3.3+, called only on a
cancel the runner marks as a user action) stops the workload: a person's Mark Failed must not leave
a GPU running, billed; a hand-over that meets a supervisor unable to answer twice is the rarer case.
Before 3.3 there is only ``cleanup``, which also runs at every triggerer shutdown: there an unread
state keeps the workload (``still_deferred`` None), as the official pod trigger's ``cleanup`` does
("Could not determine task state during cleanup; skipping pod deletion to be safe"), or each
triggerer restart whose supervisor is already going would delete every deferred GPU workload.

The state is asked for in the event loop (``SUPERVISOR_COMMS.asend``), never from a thread: in an
Airflow 3.2 triggerer a request from a thread races the loop's own and kills the trigger runner
("Response read out of order"), and in 3.3 a thread would queue behind asgiref's one
thread-sensitive executor inside the ``on_kill`` budget. It is asked through
``utils.supervisor_requests``, so that the read's timeout, or the runner's cancel, cannot leave its
answer on the channel for the next request (the same death on 3.2).

One window is left: the states endpoint gives a task instance's state, not its try number. A task
that is cleared while deferred and whose next try reaches DEFERRED before this trigger's ``on_kill``
reads the state (a triggerer that is slow to act on the cancel) looks handed over: the old try's
workload is spared and runs until it ends or is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from airflow_gpu.utils import supervisor_requests

log = logging.getLogger(__name__)

DEFERRED = "deferred"
#: Reads of the task's state before the kill goes ahead without it, and the pause between them.
STATE_READS, RETRY_PAUSE_SECONDS = 2, 0.5
#: The longest one read may take: a cleanup must end even when the supervisor does not answer.
READ_TIMEOUT_SECONDS = 10.0


async def handed_over(trigger: Any) -> bool:
    """True when the trigger's task is still DEFERRED: this ``on_kill`` is a hand-over, not a kill.

    False when the state says otherwise, or cannot be read in two tries (then the kill goes ahead:
    a person's Mark Failed must not leave a GPU running, billed).
    """
    deferred = await still_deferred(trigger)
    if deferred:
        log.warning(
            "%s is still deferred: this trigger moved to another triggerer, which follows its workload; "
            "nothing is stopped",
            trigger.task_instance,
        )
    return bool(deferred)


async def still_deferred(trigger: Any) -> bool | None:
    """Whether the trigger's task is still DEFERRED; None when its state cannot be read in two tries.

    Before Airflow 3.3 a trigger's ``cleanup`` runs on every exit, a triggerer's shutdown included,
    and it must tell a person's kill (the task no longer deferred) from a restart (still deferred)
    with this read, not the official ``safe_to_cancel``: that one asks from a thread
    (``sync_to_async``), which on a 3.2 triggerer races the loop's own requests to the supervisor,
    and in the end-to-end stack on 3.2.0 it never came back, so Mark Failed left the GPU pod running.
    Each read is bounded (``READ_TIMEOUT_SECONDS``) so that a supervisor going away cannot hold a
    cleanup for ever. The bound ends our wait only: the request itself reads its answer
    (``utils.supervisor_requests``), since on Airflow 3.2 a request cancelled after it was sent left
    its answer to the next one, and the trigger runner died ("Response read out of order").
    """
    ti = getattr(trigger, "task_instance", None)
    if ti is None:
        return None
    states: dict[str, Any] | None = None
    for attempt in range(1, STATE_READS + 1):
        try:
            states = await asyncio.wait_for(_task_states(ti), READ_TIMEOUT_SECONDS)
            break
        except Exception as error:
            last = attempt == STATE_READS
            log.warning(
                "Could not read the state of %s (%s: %s); %s",
                ti, type(error).__name__, error, "giving up" if last else "asking again",
            )  # fmt: skip
            if last:
                return None
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
    # The states endpoint suffixes a mapped task's key with its map index.
    key = f"{ti.task_id}_{ti.map_index}" if ti.map_index is not None and ti.map_index >= 0 else ti.task_id
    state = ((states or {}).get(ti.run_id) or {}).get(key)
    return str(getattr(state, "value", state)) == DEFERRED


async def _task_states(ti: Any) -> dict[str, Any]:
    """``RuntimeTaskInstance.get_task_states`` for this task instance, asked in the event loop."""
    from airflow.sdk.execution_time.comms import GetTaskStates

    request = GetTaskStates(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index)
    response = await supervisor_requests.ask(request)  # the read's timeout must not cut it in half
    states = getattr(response, "task_states", None)
    if not isinstance(states, dict):
        raise RuntimeError(f"unexpected answer {type(response).__name__}")
    return states

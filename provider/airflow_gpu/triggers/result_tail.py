"""The result line of a deferred pod that succeeded, read by the trigger and carried in its event.

A deferred task reads its pod's log only when it resumes on a worker. Between the trigger's
``success`` and that resume the completed pod can be deleted: PodGC past its threshold, a drain
that evicts completed pods, a person, a namespace cleanup. The task then succeeds without its
result (the soak, seed 9: mapped shards with no ``return_value`` for the reduce). The trigger is
the last party that sees the pod while it certainly exists, so it reads the tail of the base
container's log once, at the success, and puts the last result line into the event; the worker uses
it only when the pod is gone (``RetryingPodManager.carried``). One log read per succeeded pod, none
while pods run: the shared watch's request budget is kept.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_gpu.profiling import termination
from airflow_gpu.utils.results import RESULT_MARKER, last_result_line
from airflow_gpu.utils.termination_message import terminated_message

if TYPE_CHECKING:
    from airflow_gpu.triggers.cluster import ClusterConnection

#: The event key of the result line (absent when none was found or it could not be read).
RESULT_LINE_KEY = "gpu_result_line"
#: How far back from the end of the log the line is looked for: a workload prints it last, before the
#: profiler's summary; a longer log is read whole by the worker when the pod still exists.
RESULT_TAIL_LINES = 2_000
#: The largest line carried: the event is stored with the task instance in the metadata database
#: (``next_kwargs``), where a result of many megabytes does not belong; such a result stays the worker's read.
MAX_CARRIED_CHARS = 64 * 1024
#: How long the success event may wait for the read: the API server's proxy to the kubelet of a node just
#: lost can hang, and the event (the success itself) matters more than the line.
READ_SECONDS = 15.0


async def read_result_line(
    connection: ClusterConnection, namespace: str, name: str, container: str, log: Any
) -> str | None:
    """The pod's last result line, or None (and a log line saying why) when it cannot be carried."""
    from airflow_gpu.triggers import cluster

    read = cluster.pod_log_tail(connection, namespace, name, container, RESULT_TAIL_LINES)
    try:
        text = await asyncio.wait_for(read, READ_SECONDS)
    except Exception as error:  # the worker reads the log itself if the pod outlives the resume
        log.info("The result line of pod %s/%s could not be read here (%s: %s); the task reads it when it "
                 "resumes", namespace, name, type(error).__name__, error)  # fmt: skip
        return None
    line = last_result_line(text.splitlines())
    if line is not None and (why := _not_carried(line)):
        log.info("The result line of pod %s/%s %s; the task reads it from the pod when it resumes", namespace,
                 name, why)  # fmt: skip
        return None
    return line


def _not_carried(line: str) -> str | None:
    """Why ``line`` stays out of the event, or None. Beside its size: a NUL, which PostgreSQL's JSONB
    refuses when the triggerer stores the event (the event lost, the trigger run again and again), and
    a result that is not JSON, which the worker reports from the log as the workload's bug."""
    if len(line) > MAX_CARRIED_CHARS:
        return f"has {len(line)} characters, more than the {MAX_CARRIED_CHARS} an event carries"
    if "\x00" in line:
        return "holds a NUL character, which the metadata database refuses"
    try:
        json.loads(line[len(RESULT_MARKER) :])
    except ValueError:
        return "is not JSON"
    return None


async def with_result_line(trigger: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` of a ``GPUPodTrigger``, with the result line of its pod when it succeeded: from its log, else
    from the termination message the watch saw (``profiling.termination``): a node lost right after the
    success takes the log with it, and the pod with it soon after."""
    if payload.get("status") != "success":
        return payload
    name = str(payload.get("name") or trigger.pod_name)
    line = await read_result_line(
        trigger.connection, trigger.pod_namespace, name, trigger.base_container_name, trigger.log
    )
    if line is None:
        seen = trigger._last_seen or {}
        if (seen.get("metadata") or {}).get("name") == name:
            line = message_result_line(seen, trigger.base_container_name)
            if line is not None and _not_carried(line):
                line = None
            elif line is not None:
                trigger.log.info("The result line of pod %s/%s was read from its termination message",
                                 trigger.pod_namespace, name)  # fmt: skip
    return payload if line is None else {**payload, RESULT_LINE_KEY: line}


def message_result_line(pod: Mapping[str, Any], container: str) -> str | None:
    """The result line the profiler left in ``container``'s termination message (``profiling.termination``)."""
    return termination.read(terminated_message(pod, container))[0]

"""Loaded by every part of the end-to-end tests' Airflow stack (copied to ``$AIRFLOW_HOME/config``);
it acts in the scheduler only.

It backports the fix of apache/airflow#72767 for apache/airflow#72716, open in Airflow 3.3.2: a
deferred task resumes (same try number) and is already QUEUED or RUNNING when the scheduler drains
the executor's SUCCESS event from the worker that exited on ``defer()``; the scheduler takes that
stale event for a task killed externally and fails the resumed attempt. (3.3.2 guards SCHEDULED,
and QUEUED only while the executor still holds the workload: once a LocalExecutor worker has taken
it, ``has_task`` is False although the task instance is still QUEUED. Both cases were seen here.)
The window is the seconds a LocalExecutor worker may take to report the defer-exit, so on a busy
2-core machine a deferrable task whose trigger fires at once (a preempted pod replaced, a mapped
shard released) is failed at random. The upstream fix treats a same-try SUCCESS event for a
resumed task instance that still carries ``next_method`` (set by ``defer()``, cleared only on
terminal, retry or reschedule updates) as requeued. ``executor.has_task`` is the one place the
scheduler asks that question, so that is what is wrapped; it cannot see the event's state, so
unlike upstream it also lets a FAILED event for such an attempt pass (a worker killed while it
runs a resumed deferral): the scheduler then finds that attempt by its missing heartbeats (30 s
in this stack) instead of at once. No test kills a resumed deferral. Remove this file once the
fix is in the pinned Airflow.
"""

from __future__ import annotations

import sys
from typing import Any

if sys.argv[1:2] == ["scheduler"]:
    from airflow.executors.base_executor import BaseExecutor
    from airflow.utils.state import TaskInstanceState

    _has_task = BaseExecutor.has_task

    def _has_task_or_resumed_deferral(self: BaseExecutor, task_instance: Any) -> bool:
        state, next_method = task_instance.state, task_instance.next_method
        resumed = state in (TaskInstanceState.QUEUED, TaskInstanceState.RUNNING) and next_method is not None
        return _has_task(self, task_instance) or resumed

    BaseExecutor.has_task = _has_task_or_resumed_deferral  # type: ignore[method-assign]

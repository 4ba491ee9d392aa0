"""Running a GPU operator inside another operator's task, as part of it.

``AccelerateTrainOperator`` hands its pod or Batch job to ``GPUKubernetesOperator`` or
``GPUBatchOperator`` rather than copying their spot, profiling and cleanup code. Airflow's
``ExecutorSafeguard`` warns when an operator's ``execute`` is called by anything but the task
runner ("cannot be called outside of the Task Runner!"): here that call is by design, so the inner
operator is marked as the one the runner is executing for the duration of the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def inside(operator: Any, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``method(*args, **kwargs)`` of ``operator``, run as the task runner runs it."""
    from airflow.sdk.bases.operator import ExecutorSafeguard

    token = ExecutorSafeguard.tracker.set(operator)
    try:
        return method(*args, **kwargs)
    finally:
        ExecutorSafeguard.tracker.reset(token)


def outside_the_users_dag() -> dict[str, Any]:
    """``dag`` and ``task_group`` for an inner operator: a DAG of its own and its root group, so that
    building one (at parse time, or in the task) never adds a task to the user's DAG or TaskGroup,
    whose contexts may be open around the outer operator."""
    from airflow.sdk import DAG

    holder = DAG(dag_id="airflow_gpu_inner_operator", schedule=None)
    return {"dag": holder, "task_group": holder.task_group}


class DelegatedRun:
    """A workload that one GPU operator runs whole (one pod, one Batch job): its ``execute``, deferrals
    and reattachment included, and its ``on_kill``."""

    def __init__(self, operator: Any) -> None:
        self.op = operator

    def run(self, context: Any) -> Any:
        return inside(self.op, self.op.execute, context)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        return inside(self.op, self.op.resume_execution, next_method, next_kwargs, context)

    def on_kill(self) -> None:
        self.op.on_kill()

"""The profiler wrapper forms a task's images need, kept in the task state store for its later tries.

An image without ``/bin/sh`` (distroless) cannot start the profiler's first wrapper form; the operators
move it to the next (``profiling.wrapper_forms``) and record it in the run's state
(``SpotRun.profiler_forms``: image -> form), which rides through deferrals. A later try (an Airflow
retry) starts a new run: without this store it would fail to start each form again, a pod or an AWS
Batch job scheduled and billed for each. ``GPUKubernetesOperator`` and ``GPUBatchOperator`` share the
key (a task is one operator; the forms are the image's, not the platform's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from airflow_gpu.utils import task_state

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.spot.run import SpotRun

#: Task state store key of the forms the task's images need (image -> form), kept across tries.
FORMS_KEY = "airflow_gpu_profiler_forms"


class FormsOwner(Protocol):
    """An operator whose run records forms: its spot run, its log, and whether it read the store yet."""

    spot_run: SpotRun
    _forms_recalled: bool

    @property
    def log(self) -> Any: ...


def recall(op: FormsOwner, context: Context | None) -> None:
    """The forms an earlier try of the task found, once per task process (the run's own come first)."""
    if context is None or op._forms_recalled:
        return
    op._forms_recalled = True
    try:
        kept = task_state.read(context, FORMS_KEY)
    except Exception as error:  # the first form is tried; the run finds out again
        op.log.warning("Could not read the profiler forms of earlier tries: %s", error)
        return
    if isinstance(kept, dict):
        op.spot_run.profiler_forms = {**{str(k): str(v) for k, v in kept.items()}, **op.spot_run.profiler_forms}


def remember(op: FormsOwner, context: Context | None) -> None:
    """The run's forms into the task state store, for the task's later tries."""
    if context is None or not op.spot_run.profiler_forms:
        return
    try:
        task_state.write(context, FORMS_KEY, dict(op.spot_run.profiler_forms))
    except Exception as error:  # a later try finds out again
        op.log.warning("Could not keep the profiler forms for later tries: %s", error)

"""What the reaper tests share: the marks the real operators put on their work, and Airflow's answers.

``RecordedAirflow`` stands in for Airflow's REST API at the reaper's own boundary (``StateSource``:
"what state is this task instance in now"); ``test_airflow_api`` covers the REST client itself.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient

from airflow_gpu.reap.airflow_api import AirflowUnreachable
from airflow_gpu.reap.rules import InstanceState, TaskTry
from tests.operators.task_context import Ti

RUN = "manual__2026-05-01T10:00:00.123456+00:00"


def pod_marks(ti: Ti) -> dict[str, Any]:
    """The labels and annotations ``GPUKubernetesOperator`` gives this task try's pod (built, not run)."""
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

    operator = GPUKubernetesOperator(task_id=ti.task_id, name="train", accelerator="H100:1", cmds=["true"])
    context: Any = {"ti": ti, "run_id": ti.run_id, "dag": None}
    metadata = ApiClient().sanitize_for_serialization(operator.build_pod_request_obj(context, dry_run=True))["metadata"]
    return {"labels": metadata["labels"], "annotations": metadata["annotations"]}


class RecordedAirflow:
    """Task instance states by (dag, task, run, map index); ``unreachable_after``: calls answered first."""

    def __init__(self, states: dict[tuple[str, str, str, int], InstanceState], unreachable_after: int | None = None):
        self.states, self.asked, self.unreachable_after = states, [], unreachable_after

    def task_instance(self, task: TaskTry) -> InstanceState | None:
        if self.unreachable_after is not None and len(self.asked) >= self.unreachable_after:
            raise AirflowUnreachable("Airflow at http://airflow is not reachable (ConnectionRefusedError)")
        self.asked.append(task.instance)
        return self.states.get(task.instance)

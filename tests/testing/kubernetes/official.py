"""The official ``KubernetesPodOperator``, unmodified, pointed at the emulator as a user points it
at a cluster (``config_file``), and the stand-ins for what Airflow gives ``execute``.

``Ti`` and ``context`` are the fakes at the boundary this project owns (Airflow's task instance:
identity and XCom); everything else is the operator's own code talking to the emulator over HTTP.
"""

from __future__ import annotations

import types
from typing import Any

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator


class Ti:
    def __init__(self) -> None:
        self.dag_id, self.task_id, self.run_id, self.try_number, self.map_index = "gpu_dag", "train", "manual__1", 1, -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def context(ti: Ti | None = None) -> dict[str, Any]:
    ti = ti or Ti()
    return {"ti": ti, "task_instance": ti, "run_id": ti.run_id, "dag": types.SimpleNamespace(dag_id=ti.dag_id)}


def kpo(emulator: KubernetesEmulator, **arguments: Any) -> Any:
    """A ``KubernetesPodOperator`` with the arguments a test does not care about set once."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    defaults: dict[str, Any] = {
        "task_id": "train",
        "name": "train",
        "namespace": "default",
        "image": "python:3.12",
        "cmds": ["sh", "-c", "echo done"],
        "config_file": str(emulator.kubeconfig_path),
        "in_cluster": False,
        "get_logs": True,
        "startup_check_interval_seconds": 1,
        "on_finish_action": "keep_pod",
        "log_events_on_startup": False,
    }
    return KubernetesPodOperator(**{**defaults, **arguments})

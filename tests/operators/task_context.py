"""What an operator reads of Airflow's task context, for tests that run ``execute`` in this process.

A boundary this project owns: ``Ti`` and ``Store`` stand in for Airflow's task instance and Airflow
3.3's task state store, as far as the operators use them (identity, XCom, ``get``/``set``). The
end-to-end tests run the same paths through a real Airflow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


class Ti:
    """Airflow's task instance, as far as the operator uses it: identity and XCom."""

    def __init__(
        self,
        try_number: int = 1,
        *,
        dag_id: str = "gpu_dag",
        task_id: str = "train",
        run_id: str = "manual__1",
        map_index: int = -1,
        start_date: datetime | None = None,
        max_tries: int = 0,
    ) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = dag_id, task_id, run_id, map_index
        self.try_number, self.start_date = try_number, start_date
        self.max_tries = max_tries  # the task's retries, as Airflow sets it: a try after this one if try_number <= it
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


class Store(dict[str, Any]):
    """Airflow 3.3's task state store: ``get`` and ``set`` by key, kept across tries."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value

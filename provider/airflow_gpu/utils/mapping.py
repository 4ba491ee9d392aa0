"""Fan-out helpers: a reduce step that proceeds when enough mapped shards succeeded.

Flyte's ``min_success_ratio`` for Airflow dynamic task mapping: the reduce task runs with
``trigger_rule="all_done"`` and calls ``require_success_ratio`` first; it fails, naming the
numbers, when too few shards succeeded, and otherwise says how many did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShardReport:
    succeeded: int
    total: int

    @property
    def ratio(self) -> float:
        return self.succeeded / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"{self.succeeded} of {self.total} shards succeeded ({self.ratio:.0%})"


def check_success_ratio(succeeded: int, total: int, min_ratio: float) -> ShardReport:
    """Raise ``ValueError`` when ``succeeded / total`` is below ``min_ratio``."""
    if not 0.0 < min_ratio <= 1.0:
        raise ValueError(f"min_ratio must be in (0, 1], got {min_ratio!r}")
    report = ShardReport(succeeded, total)
    if total == 0 or report.ratio < min_ratio:
        raise ValueError(f"{report}; at least {min_ratio:.0%} required")
    return report


def require_success_ratio(context: Any, task_id: str, min_ratio: float) -> ShardReport:
    """Count the mapped instances of ``task_id`` in this run that succeeded; fail the task if too few did."""
    from airflow.sdk.exceptions import AirflowFailException

    ti = context["ti"]
    counts = {
        state: ti.get_ti_count(
            dag_id=ti.dag_id, task_ids=[task_id], run_ids=[ti.run_id], states=[state] if state else None
        )
        for state in ("success", None)
    }
    try:
        return check_success_ratio(counts["success"], counts[None], min_ratio)
    except ValueError as error:
        raise AirflowFailException(f"{task_id}: {error}") from None

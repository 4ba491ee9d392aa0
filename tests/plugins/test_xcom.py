"""``read_entries`` against Airflow's own ``dag_run`` and ``xcom`` tables, in an in-memory SQLite database.

Only the two tables the query touches are created (from Airflow's models, not by hand); rows are
written as both ways Airflow stores an XCom value: a serialised string and plain JSON (what the
Task Execution API writes for a worker's ``xcom_push``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from airflow_gpu.plugins.document import TaskEntry
from airflow_gpu.plugins.xcom import read_entries

NOW = datetime(2026, 11, 23, 15, tzinfo=timezone.utc)


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    XComModel.metadata.create_all(engine, tables=[DagRun.__table__, XComModel.__table__])
    with Session(engine) as session:
        for pk, (dag_id, run_id) in enumerate([("d", "r1"), ("d", "r2"), ("other", "r1")], start=1):
            session.execute(
                insert(DagRun.__table__).values(
                    id=pk, dag_id=dag_id, run_id=run_id, run_type="manual", run_after=NOW, log_template_id=None
                )
            )
        yield session


def _xcom(session: Session, run: tuple[int, str, str], task_id: str, map_index: int, key: str, value: Any) -> None:
    pk, dag_id, run_id = run
    row = {"dag_run_id": pk, "dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    session.execute(insert(XComModel.__table__).values(**row, key=key, value=value, timestamp=NOW))


def test_reads_the_runs_profiles_and_interruptions_by_task_instance(session: Session) -> None:
    r1, r2, other = (1, "d", "r1"), (2, "d", "r2"), (3, "other", "r1")
    _xcom(session, r1, "train", -1, "gpu_profile", XComModel.serialize_value({"v": 1, "workload": "pod"}))
    _xcom(session, r1, "score", 0, "gpu_profile", {"v": 1, "workload": "job-0"})  # plain JSON, as the API stores
    _xcom(session, r1, "score", 1, "gpu_interruptions", [{"action": "resubmit"}])
    _xcom(session, r1, "score", 1, "return_value", 7)  # another key: not read
    _xcom(session, r2, "train", -1, "gpu_profile", {"v": 1, "workload": "another run"})
    _xcom(session, other, "train", -1, "gpu_profile", {"v": 1, "workload": "another dag"})
    session.commit()
    assert read_entries(session, dag_id="d", run_id="r1") == [
        TaskEntry("score", 0, {"v": 1, "workload": "job-0"}, None),
        TaskEntry("score", 1, None, [{"action": "resubmit"}]),
        TaskEntry("train", -1, {"v": 1, "workload": "pod"}, None),
    ]
    assert [(e.task_id, e.map_index) for e in read_entries(session, dag_id="d", run_id="r1", task_id="score")] == [
        ("score", 0),
        ("score", 1),
    ]
    assert read_entries(session, dag_id="d", run_id="nope") == []


def test_a_value_airflows_serde_cannot_decode_is_kept_as_stored(session: Session) -> None:
    """serde refuses a class outside ``allowed_deserialization_classes`` with ImportError: one bad XCom, not a 500."""
    r1 = (1, "d", "r1")
    refused = json.dumps({"__classname__": "airflow_gpu.nowhere.Thing", "__version__": 1, "__data__": {"v": 1}})
    _xcom(session, r1, "odd", -1, "gpu_profile", refused)
    _xcom(session, r1, "train", -1, "gpu_profile", {"v": 1, "workload": "pod"})
    session.commit()
    with pytest.raises(ImportError):
        XComModel.deserialize_value(
            session.scalars(XComModel.get_many(run_id="r1", key="gpu_profile", dag_ids="d", task_ids="odd")).one()
        )
    assert read_entries(session, dag_id="d", run_id="r1") == [
        TaskEntry("odd", -1, refused, None),
        TaskEntry("train", -1, {"v": 1, "workload": "pod"}, None),
    ]

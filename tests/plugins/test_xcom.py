"""``XComReader`` against Airflow's own ``dag_run`` and ``xcom`` tables, in an in-memory SQLite database.

Only the two tables the queries touch are created (from Airflow's models, not by hand); rows are
written as both ways Airflow stores an XCom value: a serialised string and plain JSON (what the
Task Execution API writes for a worker's ``xcom_push``). The database connection counts every row
and every byte SQLite hands back (a ``sqlite3`` row factory), so the tests measure what a page
reads where it leaves the database, whatever the reader does with it after.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from airflow_gpu.operators.gpu_profile import publish_profile
from airflow_gpu.plugins.app import app, can_read_dag_xcom, xcom_reader
from airflow_gpu.plugins.document import RunEntry, TaskEntry, profile_summary, rollup
from airflow_gpu.plugins.urls import PREFIX, run_path, task_path
from airflow_gpu.plugins.xcom import XComReader
from airflow_gpu.utils.results import WorkloadOutput
from tests.operators.task_context import Ti
from tests.plugins.profiles import document

NOW = datetime(2026, 11, 23, 15, tzinfo=timezone.utc)
SHARDS = 50


@dataclass
class Fetched:
    """What SQLite handed back to the reader: rows, and bytes of their text and blob cells."""

    rows: int = 0
    bytes: int = 0
    counting: bool = field(default=False)

    def row(self, cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> tuple[Any, ...]:
        if self.counting:
            self.rows += 1
            self.bytes += sum(len(v) for v in values if isinstance(v, str | bytes))
        return values

    def reset(self) -> Fetched:
        self.rows, self.bytes, self.counting = 0, 0, True
        return self


@pytest.fixture
def fetched() -> Fetched:
    return Fetched()


@pytest.fixture
def session(fetched: Fetched) -> Iterator[Session]:
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    connection.row_factory = fetched.row
    engine = create_engine("sqlite://", creator=lambda: connection, poolclass=StaticPool)
    XComModel.metadata.create_all(engine, tables=[DagRun.__table__, XComModel.__table__])
    with Session(engine) as session:
        for pk, (dag_id, run_id) in enumerate([("d", "r1"), ("d", "r2"), ("other", "r1")], start=1):
            session.execute(
                insert(DagRun.__table__).values(
                    id=pk, dag_id=dag_id, run_id=run_id, run_type="manual", run_after=NOW, log_template_id=None
                )
            )
        yield session
    connection.close()


R1, R2, OTHER = (1, "d", "r1"), (2, "d", "r2"), (3, "other", "r1")


def _xcom(session: Session, run: tuple[int, str, str], task_id: str, map_index: int, key: str, value: Any) -> None:
    pk, dag_id, run_id = run
    row = {"dag_run_id": pk, "dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    session.execute(insert(XComModel.__table__).values(**row, key=key, value=value, timestamp=NOW))


def _long_document(workload: str, points: int = 240) -> dict[str, Any]:
    """A 2-GPU document with ``points`` samples per GPU series: about 60 KB, a real profile's size."""
    doc = document(2, workload=workload)
    for entry in doc["series"]:
        entry["time"] = [doc["started"] + 1.5 * i for i in range(points)]
        for name in ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock"):
            entry[name] = [float((i * 7 + entry["gpu"]) % 100) + 0.25 for i in range(points)]
    return doc


def _mapped_run(session: Session, *, summaries: bool) -> list[dict[str, Any]]:
    """``SHARDS`` mapped instances of ``score`` in run r1, as the operator leaves them (with or without summaries)."""
    documents = [_long_document(f"score-{i}") for i in range(SHARDS)]
    for i, doc in enumerate(documents):
        _xcom(session, R1, "score", i, "gpu_profile", doc)
        if summaries:
            _xcom(session, R1, "score", i, "gpu_profile_summary", profile_summary(doc))
        _xcom(session, R1, "score", i, "return_value", i)
    _xcom(session, R1, "score", 7, "gpu_interruptions", [{"action": "resubmit"}])
    _xcom(session, R2, "score", 0, "gpu_profile", _long_document("another run"))
    session.commit()
    return documents


@pytest.fixture
def client(session: Session) -> Iterator[TestClient]:
    """The report's app on the real reader over this session (only the access check is overridden)."""
    app.dependency_overrides[can_read_dag_xcom] = lambda: None
    app.dependency_overrides[xcom_reader] = lambda: XComReader(session)
    parent = FastAPI()
    parent.mount(PREFIX, app)
    try:
        yield TestClient(parent)
    finally:
        app.dependency_overrides.clear()


def test_one_instance_page_of_a_mapped_run_reads_that_instances_document_only(
    session: Session, fetched: Fetched, client: TestClient
) -> None:
    documents = _mapped_run(session, summaries=True)
    one = len(json.dumps(documents[7]))
    counted = fetched.reset()
    page = client.get(PREFIX + task_path("d", "r1", "score", 7))
    assert page.status_code == 200 and "score-7" in page.text and "score-8" not in page.text
    # Its gpu_profile and gpu_interruptions rows; never the other 49 documents (50 x 60 KB).
    assert counted.rows == 2 and one <= counted.bytes < one + 1024, (counted, one)
    counted = fetched.reset()
    twin = client.get(PREFIX + task_path("d", "r1", "score", 7, api=True)).json()
    assert twin["profile"]["workload"] == "score-7" and twin["interruptions"] == 1
    assert counted.rows == 2 and counted.bytes < one + 1024


def test_a_mapped_task_opened_without_a_map_index_reads_no_document(
    session: Session, fetched: Fetched, client: TestClient
) -> None:
    _mapped_run(session, summaries=True)
    counted = fetched.reset()
    listing = client.get(PREFIX + task_path("d", "r1", "score"))
    assert listing.status_code == 200 and f"{SHARDS} mapped instances" in listing.text
    assert counted.bytes < 100 * SHARDS, counted  # ids only: key, task id, map index


def test_the_run_page_reads_summaries_not_documents(session: Session, fetched: Fetched, client: TestClient) -> None:
    documents = _mapped_run(session, summaries=True)
    all_documents = sum(len(json.dumps(d)) for d in documents)
    counted = fetched.reset()
    run = client.get(PREFIX + run_path("d", "r1", api=True)).json()
    page = client.get(PREFIX + run_path("d", "r1"))
    # Two reads of 50 summaries (and of the ids of 50 documents), under 1 KB an instance each.
    assert counted.bytes < 2 * SHARDS * 1024 and counted.bytes < all_documents / 10, (counted, all_documents)
    # The same roll-up as the full documents give, to the figure.
    expected = rollup("d", "r1", [RunEntry("score", i, profile_summary(d)) for i, d in enumerate(documents)])
    assert run["totals"] == {**expected["totals"], "interruptions": 1}
    assert run["summarised_from_documents"] == 0 and len(run["tasks"]) == SHARDS
    assert page.text.count('<svg class="spark"') == SHARDS and "older airflow-provider-gpu" not in page.text


def test_documents_stored_without_a_summary_are_summarised_once_and_the_page_says_so(
    session: Session, fetched: Fetched, client: TestClient
) -> None:
    """A run profiled by an older provider: its documents are read once each, and the page tells why it is slow."""
    documents = _mapped_run(session, summaries=False)
    _xcom(session, R1, "score", SHARDS, "gpu_profile", _long_document("new"))
    _xcom(session, R1, "score", SHARDS, "gpu_profile_summary", profile_summary(_long_document("new")))
    session.commit()
    reader = XComReader(session)
    counted = fetched.reset()
    entries = reader.run(dag_id="d", run_id="r1")
    one = len(json.dumps(documents[0]))
    assert SHARDS * one <= counted.bytes < (SHARDS + 1) * one  # each old document once, not the new one
    assert [e.from_document for e in entries] == [True] * SHARDS + [False]
    assert [e.summary for e in entries[:SHARDS]] == [profile_summary(d) for d in documents]
    page = client.get(PREFIX + run_path("d", "r1"))
    assert f"{SHARDS} of these task instances have no stored summary" in page.text
    assert page.text.count('<svg class="spark"') == SHARDS + 1


def test_each_read_keeps_to_its_run_dag_task_and_map_index(session: Session) -> None:
    _xcom(session, R1, "train", -1, "gpu_profile", XComModel.serialize_value({"v": 1, "workload": "pod"}))
    _xcom(session, R1, "score", 0, "gpu_profile", {"v": 1, "workload": "job-0"})  # plain JSON, as the API stores
    _xcom(session, R1, "score", 1, "gpu_interruptions", [{"action": "resubmit"}])
    _xcom(session, R1, "score", 1, "return_value", 7)  # another key: not read
    _xcom(session, R2, "train", -1, "gpu_profile", {"v": 1, "workload": "another run"})
    _xcom(session, OTHER, "train", -1, "gpu_profile", {"v": 1, "workload": "another dag"})
    session.commit()
    reader = XComReader(session)
    assert reader.entry(dag_id="d", run_id="r1", task_id="train", map_index=-1) == TaskEntry(
        "train", -1, {"v": 1, "workload": "pod"}, None
    )
    assert reader.entry(dag_id="d", run_id="r1", task_id="score", map_index=1) == TaskEntry(
        "score", 1, None, [{"action": "resubmit"}]
    )
    assert reader.entry(dag_id="d", run_id="r1", task_id="score", map_index=2) is None
    assert reader.entry(dag_id="d", run_id="nope", task_id="train", map_index=-1) is None
    assert reader.map_indexes(dag_id="d", run_id="r1", task_id="score") == [0, 1]
    assert reader.map_indexes(dag_id="d", run_id="r1", task_id="train") == [-1]
    run = reader.run(dag_id="d", run_id="r1")
    assert [(e.task_id, e.map_index, e.interruptions, e.from_document) for e in run] == [
        ("score", 0, None, True),
        ("score", 1, [{"action": "resubmit"}], False),
        ("train", -1, None, True),
    ]
    assert run[1].summary is None and run[2].summary == profile_summary({"v": 1, "workload": "pod"})
    assert reader.run(dag_id="d", run_id="nope") == []


def test_a_value_airflows_serde_cannot_decode_is_kept_as_stored(session: Session) -> None:
    """serde refuses a class outside ``allowed_deserialization_classes`` with ImportError: one bad XCom, not a 500."""
    refused = json.dumps({"__classname__": "airflow_gpu.nowhere.Thing", "__version__": 1, "__data__": {"v": 1}})
    _xcom(session, R1, "odd", -1, "gpu_profile", refused)
    _xcom(session, R1, "odd", -1, "gpu_profile_summary", refused)
    session.commit()
    with pytest.raises(ImportError):
        XComModel.deserialize_value(
            session.scalars(XComModel.get_many(run_id="r1", key="gpu_profile", dag_ids="d", task_ids="odd")).one()
        )
    reader = XComReader(session)
    assert reader.entry(dag_id="d", run_id="r1", task_id="odd", map_index=-1) == TaskEntry("odd", -1, refused, None)
    assert reader.run(dag_id="d", run_id="r1") == [RunEntry("odd", -1, refused, None, False)]


def test_the_operator_pushes_the_summary_the_run_page_reads(
    session: Session, fetched: Fetched, client: TestClient
) -> None:
    """``publish_profile`` (what both GPU operators call) stores the summary beside the document."""
    ti = Ti(task_id="score", run_id="r1", map_index=0)
    output = WorkloadOutput(profile=_long_document("ignored"), profile_printed=True)
    pushed = publish_profile(
        {"ti": ti},  # type: ignore[typeddict-item]
        output,
        run=None,
        accelerator="A10G:2",
        workload="score-0",
        instance_type="g5.12xlarge",
        log=logging.getLogger("test"),
        capacity="on-demand",
        backend="kubernetes",
    )
    assert pushed is not None and ti.xcom["gpu_profile"] == pushed
    assert ti.xcom["gpu_profile_summary"] == profile_summary(pushed)
    for key, value in ti.xcom.items():
        _xcom(session, R1, "score", 0, key, value)
    session.commit()
    counted = fetched.reset()
    row = client.get(PREFIX + run_path("d", "r1", api=True)).json()["tasks"][0]
    assert counted.bytes < len(json.dumps(pushed)) / 10
    assert (row["profiled"], row["gpu_hours"], row["accelerator"]) == (True, pushed["gpu_hours"], "A10G:2")

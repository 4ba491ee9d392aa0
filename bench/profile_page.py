"""The GPU profile pages of a run of 1,000 mapped instances: time and bytes read, beside reading every document.

A SQLite database file holds Airflow's own ``dag_run`` and ``xcom`` tables (created from its
models) with one run of ``--instances`` mapped instances, each with the ``gpu_profile`` document
that ``bench/report_render.py`` builds (``--gpus`` GPUs sampled at 1 Hz for ``--hours``, the
series cut by the entrypoint's ``marker.fit``) and the ``gpu_profile_summary`` the operator
pushes beside it, and every tenth with interruption records. Each page is requested through the
report's app (FastAPI's TestClient: routing, the XCom reads, rendering; the access check is
overridden), timed as the median of ``--runs`` requests, and the bytes SQLite hands back to the
reader are counted (a ``sqlite3`` row factory: text and blob cells).

Ours: ``plugins.xcom.XComReader`` (one instance's page reads its own document; the run page the
summaries). Baseline, in the same run on the same database: the provider's approach before
0.x (every page read and decoded every document of the task or run, the run page then worked out
each row and sparkline from the documents). Target: the run page under 1 s at 1,000 instances.

    python bench/profile_page.py [--instances 1000] [--gpus 8] [--hours 1] [--runs 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from airflow_gpu.plugins.app import app, can_read_dag_xcom, xcom_reader
from airflow_gpu.plugins.document import (
    INTERRUPTIONS_KEY,
    PROFILE_KEY,
    SUMMARY_KEY,
    RunEntry,
    TaskEntry,
    profile_summary,
    sanitise,
)
from airflow_gpu.plugins.urls import PREFIX, run_path, task_path
from airflow_gpu.plugins.xcom import XComReader, decode
from report_render import make_document, synthetic_samples

DAG_ID, RUN_ID, TASK_ID = "bench", "manual__2026-11-23T15:00:00+00:00", "score"
NOW = datetime(2026, 11, 23, 15, tzinfo=timezone.utc)


class Counter:
    """Rows and bytes SQLite hands back while ``counting``."""

    def __init__(self) -> None:
        self.rows = self.bytes = 0

    def row(self, cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> tuple[Any, ...]:
        self.rows += 1
        self.bytes += sum(len(v) for v in values if isinstance(v, str | bytes))
        return values


class EveryDocument:
    """The baseline: each read decodes every ``gpu_profile`` and ``gpu_interruptions`` of the task or the run.

    Made per request, as the app's reader is: a request reads the documents once, as it did then.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.read: dict[str | None, list[TaskEntry]] = {}

    def _all(self, task_id: str | None) -> list[TaskEntry]:
        if task_id not in self.read:
            self.read[task_id] = self._read(task_id)
        return self.read[task_id]

    def _read(self, task_id: str | None) -> list[TaskEntry]:
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for key in (PROFILE_KEY, INTERRUPTIONS_KEY):
            query = XComModel.get_many(run_id=RUN_ID, key=key, dag_ids=DAG_ID, task_ids=task_id)
            for row in cast("list[XComModel]", self.session.scalars(query).all()):
                found.setdefault((row.task_id, row.map_index), {})[key] = decode(row)
        return [TaskEntry(t, i, v.get(PROFILE_KEY), v.get(INTERRUPTIONS_KEY)) for (t, i), v in sorted(found.items())]

    def entry(self, *, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskEntry | None:
        return next((e for e in self._all(task_id) if e.map_index == map_index), None)

    def map_indexes(self, *, dag_id: str, run_id: str, task_id: str) -> list[int]:
        return [e.map_index for e in self._all(task_id)]

    def run(self, *, dag_id: str, run_id: str) -> list[RunEntry]:
        return [
            RunEntry(e.task_id, e.map_index, profile_summary(sanitise(e.profile)), e.interruptions)
            for e in self._all(None)
        ]


def fill(session: Session, document: dict[str, Any], instances: int) -> int:
    """The run's XComs; returns the bytes of all its documents as stored."""
    session.execute(
        insert(DagRun.__table__).values(
            id=1, dag_id=DAG_ID, run_id=RUN_ID, run_type="manual", run_after=NOW, log_template_id=None
        )
    )
    stored = 0
    ids = {"dag_run_id": 1, "dag_id": DAG_ID, "run_id": RUN_ID, "task_id": TASK_ID, "timestamp": NOW}
    for index in range(instances):
        doc = copy.copy(document)  # the series shared: only the top-level figures differ
        hours = document["gpu_hours"] * (1 + index % 3)
        doc.update(workload=f"score-{index}", util_mean=50 + index % 40, gpu_hours=hours)
        stored += len(json.dumps(doc))
        rows = [{**ids, "map_index": index, "key": PROFILE_KEY, "value": doc}]
        rows.append({**ids, "map_index": index, "key": SUMMARY_KEY, "value": profile_summary(doc)})
        if index % 10 == 0:
            rows.append({**ids, "map_index": index, "key": INTERRUPTIONS_KEY, "value": [{"action": "resubmit"}]})
        session.execute(insert(XComModel.__table__), rows)
    session.commit()
    return stored


@contextmanager
def served(reader: Callable[[], Any]) -> Iterator[TestClient]:
    app.dependency_overrides[can_read_dag_xcom] = lambda: None
    app.dependency_overrides[xcom_reader] = reader
    parent = FastAPI()
    parent.mount(PREFIX, app)
    try:
        with TestClient(parent) as client:
            yield client
    finally:
        app.dependency_overrides.clear()


def measure(client: TestClient, counter: Counter, path: str, runs: int) -> tuple[float, int, int]:
    """Median seconds of ``runs`` requests, and the rows and bytes one request read."""
    durations = []
    for _ in range(runs):
        counter.rows = counter.bytes = 0
        start = time.perf_counter()
        response = client.get(PREFIX + path)
        durations.append(time.perf_counter() - start)
        response.raise_for_status()
    return statistics.median(durations), counter.rows, counter.bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for name in ("httpx", "httpx2"):  # a line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    seconds = int(args.hours * 3600)
    document, _ = make_document(synthetic_samples(args.gpus, seconds), args.gpus, seconds)

    counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        connection = sqlite3.connect(Path(tmp) / "airflow.db", check_same_thread=False)
        engine = create_engine("sqlite://", creator=lambda: connection, poolclass=StaticPool)
        XComModel.metadata.create_all(engine, tables=[DagRun.__table__, XComModel.__table__])
        with Session(engine) as session:
            stored = fill(session, document, args.instances)
            connection.row_factory = counter.row
            pages = {
                f"run page, {args.instances:,} mapped instances": run_path(DAG_ID, RUN_ID),
                "run page, JSON": run_path(DAG_ID, RUN_ID, api=True),
                "one instance's page": task_path(DAG_ID, RUN_ID, TASK_ID, args.instances // 2),
                "mapped task without a map index": task_path(DAG_ID, RUN_ID, TASK_ID),
            }
            results: dict[str, dict[str, tuple[float, int, int]]] = {}
            for side, reader in (("baseline", EveryDocument), ("ours", XComReader)):
                with served(lambda reader=reader: reader(session)) as client:  # type: ignore[misc]
                    results[side] = {name: measure(client, counter, path, args.runs) for name, path in pages.items()}
        connection.close()

    print(
        f"{args.instances:,} mapped instances, each a {args.gpus}-GPU x {args.hours:g} h document of "
        f"{stored / args.instances / 1024:,.0f} KiB ({stored / 2**20:,.1f} MiB in all) and its summary; "
        f"SQLite file, median of {args.runs} requests through the app"
    )
    print(f"  {'page':<36} {'baseline: every document':>34}   {'ours: what the page shows':>34}")
    for name in pages:
        cells = []
        for side in ("baseline", "ours"):
            took, rows, read = results[side][name]
            cells.append(f"{took:7.3f} s {rows:6,} rows {read / 1024:10,.0f} KiB")
        print(f"  {name:<36} {cells[0]:>34}   {cells[1]:>34}")


if __name__ == "__main__":
    main()

"""Reading the report's XComs from the metadata database, the way Airflow's own XCom route does: only what a page shows.

``XComModel.get_many`` builds the query and ``XComModel.deserialize_value`` decodes each row: the
value stored in the database, not one fetched through a custom XCom backend (which keeps only a
reference there; such a value shows as "not a GPU profile document"). A value Airflow's serde
cannot decode (a class it may not import, say) is kept as stored, as ``deserialize_value`` itself
does for a value that is not JSON, so one bad XCom never fails the whole page. Called by the API
server only: it needs a session on the metadata database.

A profile document is 10-100 KB (its series), so each page reads only what it shows:

* one task instance's page: that instance's ``gpu_profile`` and ``gpu_interruptions`` (one map index);
* a mapped task opened without a map index: which map indexes have either XCom, no value at all;
* the run page: every instance's ``gpu_profile_summary`` and ``gpu_interruptions``, and which
  instances have a ``gpu_profile`` (no value). An instance with a document but no summary (written
  by a provider older than the summary) has its document read and summarised here, once per page,
  and is marked ``from_document`` so that the page says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from airflow.models.xcom import XComModel

from airflow_gpu.plugins.document import (
    INTERRUPTIONS_KEY,
    PROFILE_KEY,
    SUMMARY_KEY,
    RunEntry,
    TaskEntry,
    profile_summary,
    sanitise,
)

if TYPE_CHECKING:
    from sqlalchemy import Select
    from sqlalchemy.orm import Session

#: The most map indexes one ``IN`` list of the fallback read names (SQLite's old limit is 999 variables).
CHUNK = 500


def decode(row: XComModel) -> Any:
    """The row's value as ``XComModel.deserialize_value`` decodes it, or as stored when decoding raises."""
    try:
        return XComModel.deserialize_value(row)
    except Exception:  # serde raises what the decoded class raises: the value is shown as not a profile
        return row.value


def _rows(session: Session, query: Select[Any]) -> list[XComModel]:
    # get_many is typed Select[tuple[XComModel]]; scalars() yields the XComModel rows themselves.
    return cast("list[XComModel]", session.scalars(query).all())


def _query(
    *, dag_id: str, run_id: str, keys: Sequence[str], task_id: str | None = None, map_indexes: Any = None
) -> Select[Any]:
    """``get_many`` for several keys (it filters on one key or none)."""
    query = XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id, map_indexes=map_indexes)
    return query.where(XComModel.key.in_(keys))


def _instances(session: Session, query: Select[Any]) -> list[tuple[str, str, int]]:
    """``(key, task id, map index)`` of the query's rows, without reading their values."""
    only_ids = query.with_only_columns(XComModel.key, XComModel.task_id, XComModel.map_index)
    return [(key, task, index) for key, task, index in session.execute(only_ids).all()]


class XComReader:
    """The report's reads on one database session (the request's): see the module docstring."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def entry(self, *, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskEntry | None:
        """One task instance's ``gpu_profile`` and ``gpu_interruptions`` (None when it has neither)."""
        keys = (PROFILE_KEY, INTERRUPTIONS_KEY)
        query = _query(dag_id=dag_id, run_id=run_id, keys=keys, task_id=task_id, map_indexes=map_index)
        values = {row.key: decode(row) for row in _rows(self.session, query)}
        if not values:
            return None
        return TaskEntry(task_id, map_index, values.get(PROFILE_KEY), values.get(INTERRUPTIONS_KEY))

    def map_indexes(self, *, dag_id: str, run_id: str, task_id: str) -> list[int]:
        """The map indexes of ``task_id`` with a profile or interruption records, sorted; no value is read."""
        query = _query(dag_id=dag_id, run_id=run_id, keys=(PROFILE_KEY, INTERRUPTIONS_KEY), task_id=task_id)
        return sorted({index for _, _, index in _instances(self.session, query)})

    def run(self, *, dag_id: str, run_id: str) -> list[RunEntry]:
        """Every task instance of the run with a profile or interruption records, summaries only, sorted."""
        summaries: dict[tuple[str, int], Any] = {}
        records: dict[tuple[str, int], Any] = {}
        for row in _rows(self.session, _query(dag_id=dag_id, run_id=run_id, keys=(SUMMARY_KEY, INTERRUPTIONS_KEY))):
            (summaries if row.key == SUMMARY_KEY else records)[(row.task_id, row.map_index)] = decode(row)
        documents = _query(dag_id=dag_id, run_id=run_id, keys=(PROFILE_KEY,))
        profiled = {(task, index) for _, task, index in _instances(self.session, documents)}
        worked_out = self._summarise(dag_id, run_id, profiled - summaries.keys())
        entries = []
        for ids in sorted(profiled | summaries.keys() | records.keys()):
            summary = summaries.get(ids, worked_out.get(ids))
            entries.append(RunEntry(*ids, summary, records.get(ids), from_document=ids in worked_out))
        return entries

    def _summarise(self, dag_id: str, run_id: str, instances: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Any]:
        """The summaries of documents stored without one: each document read once, by task and map index."""
        by_task: dict[str, list[int]] = {}
        for task, index in instances:
            by_task.setdefault(task, []).append(index)
        found: dict[tuple[str, int], Any] = {}
        for task, indexes in sorted(by_task.items()):
            indexes.sort()
            for start in range(0, len(indexes), CHUNK):
                chunk = indexes[start : start + CHUNK]
                query = _query(dag_id=dag_id, run_id=run_id, keys=(PROFILE_KEY,), task_id=task, map_indexes=chunk)
                for row in _rows(self.session, query):
                    found[(row.task_id, row.map_index)] = profile_summary(sanitise(decode(row)))
        return found

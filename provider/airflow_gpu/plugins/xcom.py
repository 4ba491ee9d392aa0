"""Reading the report's XComs from the metadata database, the way Airflow's own XCom route does.

``XComModel.get_many`` builds the query and ``XComModel.deserialize_value`` decodes each row: the
value stored in the database, not one fetched through a custom XCom backend (which keeps only a
reference there; such a value shows as "not a GPU profile document"). A value Airflow's serde
cannot decode (a class it may not import, say) is kept as stored, as ``deserialize_value`` itself
does for a value that is not JSON, so one bad XCom never fails the whole page. Called by the API
server only: it needs a session on the metadata database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from airflow.models.xcom import XComModel

from airflow_gpu.plugins.document import INTERRUPTIONS_KEY, PROFILE_KEY, TaskEntry

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def decode(row: XComModel) -> Any:
    """The row's value as ``XComModel.deserialize_value`` decodes it, or as stored when decoding raises."""
    try:
        return XComModel.deserialize_value(row)
    except Exception:  # serde raises what the decoded class raises: the value is shown as not a profile
        return row.value


def read_entries(session: Session, *, dag_id: str, run_id: str, task_id: str | None = None) -> list[TaskEntry]:
    """Every task instance of the run (of ``task_id`` only, when given) with a profile or interruption records.

    One ``TaskEntry`` per (task id, map index), sorted; ``profile`` and ``interruptions`` are the
    deserialised values (any shape: the pages check them) or None where that XCom is absent.
    """
    found: dict[tuple[str, int], dict[str, object]] = {}
    for key in (PROFILE_KEY, INTERRUPTIONS_KEY):
        query = XComModel.get_many(run_id=run_id, key=key, dag_ids=dag_id, task_ids=task_id)
        # get_many is typed Select[tuple[XComModel]]; scalars() yields the XComModel rows themselves.
        for row in cast("list[XComModel]", session.scalars(query).all()):
            found.setdefault((row.task_id, row.map_index), {})[key] = decode(row)
    return [
        TaskEntry(task, index, values.get(PROFILE_KEY), values.get(INTERRUPTIONS_KEY))
        for (task, index), values in sorted(found.items())
    ]

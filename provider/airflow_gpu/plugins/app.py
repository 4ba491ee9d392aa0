"""The report's FastAPI app, mounted by the API server at ``/gpu-profile`` (see ``plugin``).

Routes (relative to the mount point; ids are single path segments, percent-encoded):

* ``GET /dags/{dag_id}/runs/{run_id}/tasks/{task_id}?map_index=N``: one task instance's page.
  Without ``map_index`` (or with the UI's literal ``{MAP_INDEX}``) it shows the unmapped instance,
  or lists a mapped task's instances.
* ``GET /dags/{dag_id}/runs/{run_id}``: the DAG run's roll-up page.
* ``GET /api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}?map_index=N`` and
  ``GET /api/dags/{dag_id}/runs/{run_id}``: the same as JSON, for scripts.

Airflow does not authenticate plugin apps: every route depends on ``can_read_dag_xcom``, core's
``requires_access_dag("GET", XCOM)``, which reads ``dag_id`` from the path and answers 401 without
a token or with an expired one (``Authorization: Bearer``, else the UI's ``_token`` cookie, so the
UI's same-origin iframe is signed in), 403 for a token that does not verify and when the auth
manager denies this DAG. The XCom reads go through
the ``xcom_reader`` dependency (a ``Reader``); tests override both, which are the boundaries this
module owns. Each page reads only what it shows (``xcom``): one instance's page its own document,
the run page the instances' summaries, never every instance's document.
Every entry read is ``document.clean``ed first, so a document holding NaN, infinities, huge
integers or non-JSON values renders and encodes like any other (never a 500).
HTML answers carry a Content-Security-Policy that forbids every script: the pages need none.

A request with ``Sec-Fetch-Dest: iframe`` comes from the UI's tab (a sandboxed iframe, see
``pages``): its pages show outside addresses as text to copy, and a 401 for it is a page saying
where the report is in the Airflow UI rather than JSON shown in the tab. Answers vary on that header.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol
from urllib.parse import quote

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_gpu.plugins import pages
from airflow_gpu.plugins.document import (
    RunEntry,
    TaskEntry,
    clean,
    clean_run,
    interruption_count,
    is_profile,
    rollup,
)
from airflow_gpu.plugins.urls import parse_map_index
from airflow_gpu.plugins.xcom import XComReader


class Reader(Protocol):
    """What the routes read, as ``xcom.XComReader`` reads it from the metadata database."""

    def entry(self, *, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskEntry | None:
        """One task instance's profile and interruption records (None: it has neither)."""

    def map_indexes(self, *, dag_id: str, run_id: str, task_id: str) -> list[int]:
        """The map indexes of a task with a profile or interruption records, sorted."""

    def run(self, *, dag_id: str, run_id: str) -> list[RunEntry]:
        """Every task instance of the run with a profile or interruption records: summaries, not documents."""


#: No script, no remote resource; only the UI (same origin) may frame the page.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)

#: Every route's access check: a signed-in user whom the auth manager lets read this DAG's XComs.
can_read_dag_xcom = requires_access_dag("GET", DagAccessEntity.XCOM)


def xcom_reader(session: SessionDep) -> Reader:
    """The XCom reader a request uses: ``xcom.XComReader`` on the request's database session."""
    return XComReader(session)


ReaderDep = Annotated[Reader, Depends(xcom_reader)]
MapIndexQuery = Annotated[str | None, Query(description="Map index (-1: unmapped); absent: let the page choose")]

app = FastAPI(
    title="GPU profile",
    description="GPU profiles of Airflow task instances (XCom gpu_profile) as pages and JSON.",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)


def _map_index(raw: str | None) -> int | None:
    try:
        return parse_map_index(raw)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"map_index: {error}") from error


def _html(content: str, status_code: int = status.HTTP_200_OK, headers: dict[str, str] | None = None) -> HTMLResponse:
    headers = {
        **(headers or {}),
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "Vary": "Sec-Fetch-Dest",
    }
    return HTMLResponse(content, status_code=status_code, headers=headers)


def _framed(request: Request) -> bool:
    """Whether the browser loads this page into a frame (the UI's tab), as Fetch Metadata says."""
    return request.headers.get("sec-fetch-dest") == "iframe"


def _read_run(reader: Reader, *, dag_id: str, run_id: str) -> list[RunEntry]:
    """The run's entries made JSON-safe (``document.clean_run``): XCom holds whatever a task pushed."""
    return [clean_run(entry) for entry in reader.run(dag_id=dag_id, run_id=run_id)]


def _base(request: Request) -> str:
    """Where the app is mounted (``/gpu-profile``, under the API server's own root path if any)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _pick(
    reader: Reader, *, dag_id: str, run_id: str, task_id: str, wanted: int | None
) -> tuple[TaskEntry | None, int | None, list[int]]:
    """The entry to show (made JSON-safe), its map index, and (a mapped task opened without a map index) the choices.

    Only the instance shown is read: without a map index, the unmapped instance; where there is
    none, the map indexes that have a profile (no document read) to choose from.
    """
    ids = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    if wanted is not None:
        entry = reader.entry(**ids, map_index=wanted)
        return (None if entry is None else clean(entry)), wanted, []
    unmapped = reader.entry(**ids, map_index=-1)
    if unmapped is not None:
        return clean(unmapped), -1, []
    mapped = [index for index in reader.map_indexes(**ids) if index >= 0]
    return (None, None, mapped) if mapped else (None, -1, [])


_DAG = [Depends(can_read_dag_xcom)]


def _where(request: Request) -> str:
    """Where the Airflow UI shows the report a request asked for, in words (its ids from the path)."""
    params = request.path_params
    place = f"DAG {params.get('dag_id', '?')}, its run {params.get('run_id', '?')}"
    if "task_id" not in params:
        return place + ", and the run's GPU Profile tab"
    try:
        index = parse_map_index(request.query_params.get("map_index"))
    except ValueError:
        index = None
    shard = f" [{index}]" if index is not None and index >= 0 else ""
    return place + f", task {params['task_id']}{shard}, and its GPU Profile tab"


def _address(request: Request) -> str:
    """The URL the browser asked for, ids still percent-encoded (``request.url`` has them decoded), to copy."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.url.path)
    query = request.url.query
    return f"{request.url.scheme}://{request.url.netloc}{path}" + (f"?{query}" if query else "")


@app.exception_handler(StarletteHTTPException)
async def framed_sign_in(request: Request, error: StarletteHTTPException) -> Response:
    """A 401 for a framed request as a page that says what to do; every other error as FastAPI answers it."""
    if error.status_code == status.HTTP_401_UNAUTHORIZED and _framed(request):
        content = pages.framed_sign_in_page(_address(request), _where(request))
        return _html(content, status.HTTP_401_UNAUTHORIZED, dict(error.headers or {}))
    return await http_exception_handler(request, error)


@app.get("/dags/{dag_id}/runs/{run_id}/tasks/{task_id}", response_class=HTMLResponse, dependencies=_DAG)
def task_instance_page(
    request: Request, dag_id: str, run_id: str, task_id: str, reader: ReaderDep, map_index: MapIndexQuery = None
) -> HTMLResponse:
    """One task instance's profile page (or a mapped task's index, or the empty state)."""
    wanted = _map_index(map_index)
    entry, index, choices = _pick(reader, dag_id=dag_id, run_id=run_id, task_id=task_id, wanted=wanted)
    base = _base(request)
    if choices:
        return _html(pages.map_index_page(dag_id, run_id, task_id, choices, base))
    if entry is None or entry.profile is None:
        return _html(pages.missing_page(dag_id, run_id, task_id, index, base))
    return _html(
        pages.task_page(
            entry.profile,
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=entry.map_index,
            base=base,
            interruptions=entry.interruptions,
            framed=_framed(request),
        )
    )


@app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse, dependencies=_DAG)
def dag_run_page(request: Request, dag_id: str, run_id: str, reader: ReaderDep) -> HTMLResponse:
    """The run's roll-up page over every task instance with a profile or interruptions."""
    entries = _read_run(reader, dag_id=dag_id, run_id=run_id)
    return _html(pages.run_page(rollup(dag_id, run_id, entries), entries, _base(request), framed=_framed(request)))


@app.get("/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}", dependencies=_DAG)
def task_instance_json(
    dag_id: str, run_id: str, task_id: str, reader: ReaderDep, map_index: MapIndexQuery = None
) -> dict[str, Any]:
    """``profile``: the XCom document as stored (null when absent); ``map_indexes``: a mapped task's choices."""
    entry, index, choices = _pick(reader, dag_id=dag_id, run_id=run_id, task_id=task_id, wanted=_map_index(map_index))
    profile = entry.profile if entry is not None else None
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": index,
        "map_indexes": choices,
        "is_profile": is_profile(profile),
        "interruptions": interruption_count(
            profile if is_profile(profile) else None, entry.interruptions if entry is not None else None
        ),
        "profile": profile,
    }


@app.get("/api/dags/{dag_id}/runs/{run_id}", dependencies=_DAG)
def dag_run_json(dag_id: str, run_id: str, reader: ReaderDep) -> dict[str, Any]:
    """The roll-up: ``totals``, ``prices`` (date and source of the list prices used) and one ``tasks`` row each.

    ``summarised_from_documents``: how many rows were worked out from a full document (no summary stored).
    """
    return rollup(dag_id, run_id, _read_run(reader, dag_id=dag_id, run_id=run_id))

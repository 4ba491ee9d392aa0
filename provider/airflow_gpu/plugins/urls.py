"""Where the report lives: the paths the app serves, its UI tabs point at and the extra link builds.

One module so that the three never disagree. Ids are percent-encoded as whole path segments (a
run id holds ``:`` and ``+``); the app receives them decoded. Pure: no Airflow, no FastAPI.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

#: Where the API server mounts the app (``fastapi_apps`` ``url_prefix``); not a reserved prefix.
PREFIX = "/gpu-profile"
#: The Airflow UI fills ``{MAP_INDEX}`` only on a mapped task instance's page; elsewhere it stays literal.
MAP_INDEX_PLACEHOLDER = "{MAP_INDEX}"


def _segment(value: str) -> str:
    return quote(value, safe="")


def run_path(dag_id: str, run_id: str, *, api: bool = False) -> str:
    """The DAG-run page (or its JSON twin with ``api``), relative to the app's mount point."""
    return f"{'/api' if api else ''}/dags/{_segment(dag_id)}/runs/{_segment(run_id)}"


def task_path(dag_id: str, run_id: str, task_id: str, map_index: int | None = None, *, api: bool = False) -> str:
    """The task-instance page (or its JSON twin); ``map_index`` None leaves the choice to the page."""
    path = f"{run_path(dag_id, run_id, api=api)}/tasks/{_segment(task_id)}"
    return path if map_index is None else f"{path}?map_index={map_index}"


def parse_map_index(raw: str | None) -> int | None:
    """None when no map index was given (absent, empty, or the UI's literal placeholder), else an int >= -1.

    ``ValueError`` for anything else, which the routes answer with 400.
    """
    if raw is None or raw.strip() in ("", MAP_INDEX_PLACEHOLDER):
        return None
    value = int(raw.strip())
    if value < -1:
        raise ValueError(f"map_index must be -1 or more, got {value}")
    return value


def base_path(base_url: str | None) -> str:
    """The path part of ``[api] base_url`` without its trailing slash ('' when Airflow is served at /)."""
    if not base_url:
        return ""
    path = urlsplit(base_url).path if "://" in base_url else base_url
    return path.rstrip("/")


def absolute_task_url(base_url: str, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The task page as an absolute URL under ``base_url`` (the API server's public address)."""
    return f"{base_url.rstrip('/')}{PREFIX}{task_path(dag_id, run_id, task_id, map_index)}"

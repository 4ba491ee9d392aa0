"""The production shape of the local Airflow (``AirflowStack(celery_broker=...)``, the soak's): the
parts it starts parse as Airflow's own CLI reads them, and CeleryExecutor gets the settings the
celery provider reads, with its results on the metadata database."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack

POSTGRES = "postgresql+psycopg2://airflow@127.0.0.1:5999/postgres"


def stack(tmp_path: Path, **shape: object) -> AirflowStack:
    return AirflowStack(tmp_path, tmp_path, extra_env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": POSTGRES}, **shape)  # type: ignore[arg-type]


def test_the_default_stays_the_four_parts_on_local_executor(tmp_path: Path) -> None:
    default = stack(tmp_path)
    assert list(default.components()) == ["api-server", "scheduler", "dag-processor", "triggerer"]
    assert default.env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "AIRFLOW__CELERY__BROKER_URL" not in default.env


@pytest.mark.slow  # Airflow's whole CLI parser: every provider's commands, ~30 s of CPU on 2 busy cores
def test_celery_parts_parse_as_airflow_reads_them(tmp_path: Path) -> None:
    from airflow.cli import cli_parser

    shape = stack(tmp_path, celery_broker="redis://127.0.0.1:6399/0", celery_workers=2, triggerers=2)
    parts = shape.components()
    assert list(parts) == [
        "api-server", "scheduler", "dag-processor", "triggerer-1", "triggerer-2", "worker-1", "worker-2",
    ]  # fmt: skip
    parser = cli_parser.get_parser()
    hostnames = set()
    for name in ("triggerer-1", "worker-1", "worker-2"):
        args = parser.parse_args(list(parts[name]))
        assert args.skip_serve_logs  # two of each on one machine: Airflow's fixed log ports would clash
        if name.startswith("worker"):
            assert args.concurrency == 4
            hostnames.add(args.celery_hostname)
    assert len(hostnames) == 2  # Celery refuses a second worker of the same hostname


def test_celery_settings_put_results_on_the_metadata_database(tmp_path: Path) -> None:
    env = stack(tmp_path, celery_broker="redis://127.0.0.1:6399/0").env
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://127.0.0.1:6399/0"
    # Celery's database result backend: SQLAlchemy's URL behind "db+" (celery.backends.database)
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+postgresql+psycopg2://airflow@127.0.0.1:5999/postgres"
    from celery.app.backends import by_url
    from sqlalchemy.engine import make_url

    backend, url = by_url(env["AIRFLOW__CELERY__RESULT_BACKEND"])
    assert backend.__name__ == "DatabaseBackend"
    # the driver Airflow installs: a bare postgresql:// is psycopg 3 to SQLAlchemy 2, not installed
    assert make_url(url).get_dialect().driver == "psycopg2"


def test_celery_refuses_sqlite(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        _ = AirflowStack(tmp_path, tmp_path, celery_broker="redis://127.0.0.1:6399/0").env


def test_the_celery_executor_loads_with_the_installed_celery() -> None:
    """celery 5.7 removed ``celery.backends.database.retry``, which the celery provider imports: the
    scheduler could not load CeleryExecutor and every worker exited (pyproject pins celery<5.7)."""
    from airflow.providers.celery.executors import celery_executor_utils
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    assert CeleryExecutor.__module__.endswith("celery_executor")

    assert callable(celery_executor_utils.execute_workload)  # what a worker runs for each task


def test_a_request_the_api_server_keeps_failing_carries_the_end_of_its_log(tmp_path: Path) -> None:
    """CI keeps only the test output, not the stack's home: a 500 that outlasts the retries names its cause.
    The api-server is a plain HTTP server here that answers 500 to everything (a boundary this test owns)."""
    import http.server
    import threading
    import urllib.error

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(500)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        failing = AirflowStack(tmp_path, tmp_path, port=server.server_address[1])
        (tmp_path / "logs").mkdir()
        lines = [f"line {n}" for n in range(100)] + ["sqlalchemy.exc.TimeoutError: QueuePool limit reached"]
        (tmp_path / "logs" / "api-server.log").write_text("\n".join(lines) + "\n")
        with pytest.raises(urllib.error.HTTPError) as raised:
            failing.request("GET", "/api/v2/dags/x", auth=False, attempts=2)
    finally:
        server.shutdown()
    assert raised.value.code == 500
    (note,) = raised.value.__notes__
    assert note.splitlines()[0] == "the api-server's log ends:"
    assert note.splitlines()[1:] == lines[-60:]  # the last 60 lines, the cause among them

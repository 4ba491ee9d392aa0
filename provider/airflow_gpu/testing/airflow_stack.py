"""A real Airflow (api-server, scheduler, dag-processor, triggerer) on SQLite, for the demo and e2e tests.

``airflow standalone`` does the same but binds 0.0.0.0:8080, starts 32 executor workers and
picks its own password; this starts the four parts on 127.0.0.1 with a free port, a small
``parallelism`` for a 2-core machine, one JWT secret shared by every part, and a fixed admin
password, each in its own process group so that ``stop()`` leaves nothing behind.

The production shape (the soak, ``make soak``) is the same class with ``celery_broker`` set:
CeleryExecutor with that Redis as broker and the metadata database as Celery's result backend,
``celery_workers`` ``airflow celery worker`` processes (each its own ``--celery-hostname``) and
``triggerers`` triggerers for HA. Workers and triggerers then skip their log servers: they all
share this machine and one ``AIRFLOW_HOME``, where the api-server reads the task logs from disk,
and Airflow's fixed log-server ports (8793, 8794) would be taken by the first of each.
``kill_part`` and ``restart_part`` let a fault injector SIGKILL one part and start it again, as a
supervisor (systemd, Kubernetes) would.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_gpu.testing.polling import wait_for

COMPONENTS: tuple[tuple[str, ...], ...] = (
    ("api-server",),
    ("scheduler",),
    ("dag-processor",),
    ("triggerer",),
)
#: CeleryExecutor's ``[celery] result_backend`` on the metadata database: SQLAlchemy's URL behind
#: Celery's ``db+`` prefix, with the driver named: SQLAlchemy 2 reads a bare ``postgresql://`` as
#: psycopg 3 here, which Airflow does not install (the scheduler died on its first task).
CELERY_DATABASE_PREFIXES = ("postgresql+psycopg2://", "postgresql://")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class AirflowStack:
    """Start, talk to (REST API v2) and stop a local Airflow."""

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        port: int | None = None,
        password: str = "admin",
        parallelism: int = 4,
        extra_env: dict[str, str] | None = None,
        users: dict[str, str] | None = None,
        celery_broker: str | None = None,
        celery_workers: int = 2,
        celery_concurrency: int = 4,
        triggerers: int = 1,
    ) -> None:
        """``users``: more simple-auth-manager users beside the admin, name -> role (``viewer``, ``user``,
        ``op``, ``admin``), each with a generated password (``passwords``). ``celery_broker`` (a
        ``redis://`` URL) selects CeleryExecutor with ``celery_workers`` workers of
        ``celery_concurrency`` slots each; the metadata database must then be PostgreSQL
        (``extra_env``), where Celery keeps its results."""
        self.home = home.resolve()
        self.dags_folder = dags_folder.resolve()
        self.port = port or free_port()
        self.username, self.password = "admin", password
        self.roles = {self.username: "admin", **(users or {})}
        self.passwords = {name: secrets.token_urlsafe(12) for name in self.roles} | {self.username: password}
        self.parallelism = parallelism
        self.extra_env = extra_env or {}
        self.celery_broker = celery_broker
        self.celery_workers = celery_workers if celery_broker else 0
        self.celery_concurrency = celery_concurrency
        self.triggerers = triggerers
        self.processes: list[subprocess.Popen[bytes]] = []
        self.parts: dict[str, subprocess.Popen[bytes]] = {}  # part name (its log's name) -> its process
        self.restarts: dict[str, int] = {}
        self._token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        secret_file = self.home / "jwt-secret"
        if not secret_file.exists():
            secret_file.write_text(secrets.token_urlsafe(32))
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",  # parts start `airflow ...`
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{r}" for n, r in self.roles.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secret_file.read_text(),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            # Airflow's default: each file is parsed again at most every 30 s. Every parse forks a
            # process that imports the kubernetes clients (~2.5 s of CPU), so at 5 s the DAG
            # processor alone kept both cores of a small machine busy.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            **self.extra_env,
        }
        if self.celery_broker:
            env |= self.celery_env(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        return env

    def celery_env(self, database: str) -> dict[str, str]:
        """CeleryExecutor's settings: Redis as broker, results in the metadata database."""
        prefix = next((p for p in CELERY_DATABASE_PREFIXES if database.startswith(p)), None)
        if prefix is None:
            raise ValueError(f"CeleryExecutor's result backend needs PostgreSQL, not {database.split(':')[0]}")
        return {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": str(self.celery_broker),
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+postgresql+psycopg2://" + database.removeprefix(prefix),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.celery_concurrency),
        }

    def components(self) -> dict[str, tuple[str, ...]]:
        """Part name -> its ``airflow`` arguments, in start order (the four COMPONENTS first)."""
        parts: dict[str, tuple[str, ...]] = {"api-server": ("api-server",), "scheduler": ("scheduler",)}
        parts["dag-processor"] = ("dag-processor",)
        production = self.celery_broker is not None or self.triggerers > 1
        skip_logs = ("--skip-serve-logs",) if production else ()
        for number in range(1, self.triggerers + 1):
            parts["triggerer" if self.triggerers == 1 else f"triggerer-{number}"] = ("triggerer", *skip_logs)
        for number in range(1, self.celery_workers + 1):
            name = f"worker-{number}"
            parts[name] = ("celery", "worker", "--celery-hostname", f"{name}@%h", "--skip-serve-logs",
                           "--concurrency", str(self.celery_concurrency))  # fmt: skip
        return parts

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float = 240) -> AirflowStack:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps(self.passwords))
        env = self.env
        migrate = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env, capture_output=True, timeout=600
        )
        if migrate.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{migrate.stderr.decode()[-3000:]}")
        self._use_write_ahead_log(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        (self.home / "logs").mkdir(exist_ok=True)
        for name in self.components():
            self._start_part(name, env)
        try:
            wait_for(self._healthy, timeout, "the Airflow API server to answer", interval=0.5)
        except TimeoutError:
            self.stop()
            raise
        return self

    def _start_part(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.home / "logs" / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [str(Path(sys.executable).parent / "airflow"), *self.components()[name]],
                env=env or self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() reaches its children
            )
        self.parts[name] = process
        self.processes.append(process)
        return process

    def kill_part(self, name: str) -> None:
        """SIGKILL one part and every process of its group (a worker's task processes too), as the
        kernel's OOM killer or a lost machine would: no cleanup runs."""
        process = self.parts[name]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def restart_part(self, name: str) -> subprocess.Popen[bytes]:
        """Start a killed (or exited) part again, as its supervisor would."""
        if self.parts[name].poll() is None:
            self.kill_part(name)
        self.restarts[name] = self.restarts.get(name, 0) + 1
        return self._start_part(name)

    @staticmethod
    def _use_write_ahead_log(database: str) -> None:
        """SQLite's write-ahead log: readers (the UI, the scheduler's queries, the tests' polls) no
        longer block the one writer, nor it them, so a burst of tasks starting at once meets far
        fewer "database is locked" answers. The mode is kept in the database file: every part opens
        it in WAL mode. Another database (``extra_env``) is left as it is."""
        import logging
        import sqlite3

        if not database.startswith("sqlite:///"):
            return
        with contextlib.closing(sqlite3.connect(database.removeprefix("sqlite:///").split("?")[0])) as db:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            logging.getLogger(__name__).warning("SQLite kept journal_mode=%s; expect 'database is locked'", mode)

    def _healthy(self) -> bool:
        try:
            health = self.request("GET", "/api/v2/monitor/health", auth=False, attempts=1)
        except (OSError, urllib.error.URLError):
            return False
        return bool(health.get("scheduler", {}).get("status") == "healthy")

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every part's process group, then SIGKILL what is still there."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # children of the part, too
            process.wait()
        self.processes.clear()
        self.parts.clear()

    def log_tail(self, part: str, lines: int = 60) -> str:
        """The last ``lines`` lines of one part's log: what a failed test shows, since the stack's
        home is gone with the machine that ran it (CI keeps only the test output)."""
        path = self.home / "logs" / f"{part}.log"
        if not path.exists():
            return f"(no log at {path})"
        with path.open("rb") as log:
            log.seek(max(log.seek(0, os.SEEK_END) - 256 * 1024, 0))
            tail = log.read().decode(errors="replace").splitlines()[-lines:]
        return "\n".join(tail)

    def __enter__(self) -> AirflowStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- REST API v2, as the UI calls it --------------------------------------------------

    def token(self) -> str:
        if self._token is None:
            answer = self.request(
                "POST", "/auth/token", {"username": self.username, "password": self.password}, auth=False
            )
            self._token = str(answer["access_token"])
        return self._token

    def request(self, method: str, path: str, body: Any = None, auth: bool = True, attempts: int = 6) -> Any:
        """One REST call; a 5xx answer is tried again, up to ``attempts`` times in all, 0.5 s after the first
        and twice as long after each next one (15.5 s in all, as Airflow's workers back off exponentially).

        On SQLite a burst of writers (a dozen tasks starting at once) can leave one request
        waiting out the 5 s busy timeout: the API server answers 500 and has rolled the request's
        transaction back. Airflow's own workers retry such answers (``[workers]
        execution_api_retries``); a client of the stack does the same. A POST answered 500 after
        its commit would meet 409 on the retry and raise it: the caller sees it, nothing is doubled.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        for attempt in range(1, attempts + 1):
            request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    raw = response.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as error:
                if error.code >= 500 and attempt == attempts:
                    error.add_note(f"the api-server's log ends:\n{self.log_tail('api-server')}")
                if error.code < 500 or attempt == attempts:
                    raise
                time.sleep(0.5 * 2 ** (attempt - 1))  # a burst of writers can hold SQLite for several 5 s waits
        raise AssertionError("unreachable")

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> dict[str, Any]:
        def probe() -> Any:
            try:
                return self.request("GET", f"/api/v2/dags/{dag_id}")
            except urllib.error.HTTPError as error:
                if error.code == 404:
                    return None
                raise

        found: dict[str, Any] = wait_for(probe, timeout, f"the DAG {dag_id} to be parsed", interval=0.5)
        return found

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Unpause and trigger, as the UI's trigger button does; returns the run id."""
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        from datetime import datetime, timezone

        run = self.request(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            {"logical_date": datetime.now(timezone.utc).isoformat(), "conf": conf or {}},
        )
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        answer = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000")
        instances: list[dict[str, Any]] = answer["task_instances"]
        return instances

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        try:
            entry = self.request(
                "GET",
                f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
                f"?map_index={map_index}&deserialize=true",
            )
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise
        value = entry.get("value")
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

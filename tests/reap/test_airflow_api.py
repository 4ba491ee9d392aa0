"""The reaper's questions to Airflow's REST API v2.

The paths and fields it reads are checked against the installed Airflow's own OpenAPI documents
(the api-server's contract). The answers come from a small HTTP server of this test that speaks
as the api-server does (JSON ``detail`` on errors, ``POST /auth/token``): no Airflow stack is
started here; the soak and the e2e stack run the reaper against a real one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import airflow
import pytest
import yaml

from airflow_gpu.reap import airflow_api
from airflow_gpu.reap.airflow_api import AirflowApi, AirflowRefused, AirflowUnreachable
from airflow_gpu.reap.rules import InstanceState, TaskTry
from airflow_gpu.testing.airflow_stack import free_port

API = Path(airflow.__file__).parent / "api_fastapi"
RUN = "manual__2026-05-01T10:00:00.123456+00:00"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((API / "core_api/openapi/v2-rest-api-generated.yaml").read_text())
    return loaded


def test_the_paths_and_fields_read_are_airflows(spec: dict[str, Any]) -> None:
    paths = spec["paths"]
    for path in (
        "/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}",
        "/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/{map_index}",
        "/api/v2/version",
    ):
        assert "get" in paths[path], path
    fields = spec["components"]["schemas"]["TaskInstanceResponse"]["properties"]
    assert {"state", "try_number", "end_date"} <= set(fields)
    assert {"upstream_failed", "removed", "deferred", "up_for_retry"} <= set(
        spec["components"]["schemas"]["TaskInstanceState"]["enum"]
    )
    assert "version" in spec["components"]["schemas"]["VersionInfo"]["properties"]
    auth = yaml.safe_load((API / "auth/managers/simple/openapi/v2-simple-auth-manager-generated.yaml").read_text())
    assert "post" in auth["paths"]["/auth/token"]


class Answers(BaseHTTPRequestHandler):
    """Airflow's api-server, as far as the reaper asks it."""

    instances: dict[str, dict[str, Any]] = {}
    requests: list[tuple[str, str, str | None]] = []
    token = "jwt-for-admin"
    plain_404 = False

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        raw = json.dumps(body).encode() if body is not None else b"<html>not found</html>"
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if body is not None else "text/html")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Answers.requests.append(("POST", self.path, None))
        if self.path == "/auth/token" and body == {"username": "admin", "password": "secret"}:
            self._send(201, {"access_token": self.token})
        else:
            self._send(401, {"detail": "Invalid credentials"})

    def do_GET(self) -> None:
        Answers.requests.append(("GET", self.path, self.headers.get("Authorization")))
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self._send(401, {"detail": "Not authenticated"})
        elif self.path == "/api/v2/version":
            self._send(200, {"version": "3.3.2", "git_version": None})
        elif self.path in self.instances:
            answer = self.instances[self.path]
            self._send(answer.pop("_status", 200), answer)
        elif self.plain_404:
            self._send(404, None)
        else:
            self._send(404, {"detail": "The Task Instance ... was not found"})


@pytest.fixture
def server() -> Iterator[str]:
    Answers.instances, Answers.requests, Answers.plain_404 = {}, [], False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_user_and_password_become_a_token_and_run_ids_are_quoted(server: str) -> None:
    quoted = "manual__2026-05-01T10%3A00%3A00.123456%2B00%3A00"
    Answers.instances[f"/api/v2/dags/gpu/dagRuns/{quoted}/taskInstances/shard/3"] = {
        "state": "failed", "try_number": 2, "end_date": "2026-05-01T10:05:00Z",
    }  # fmt: skip
    api = AirflowApi(server, username="admin", password="secret")
    assert api.check() == "3.3.2"
    found = api.task_instance(TaskTry("gpu", "shard", RUN, 3, 1))
    assert found is not None and (found.state, found.try_number) == ("failed", 2)
    assert found.end_date is not None and found.end_date.isoformat() == "2026-05-01T10:05:00+00:00"
    assert Answers.requests[0] == ("POST", "/auth/token", None)  # once, then the token is kept
    assert [r[0] for r in Answers.requests].count("POST") == 1


def test_an_unmapped_instance_is_asked_without_a_map_index_and_missing_is_none(server: str) -> None:
    Answers.instances["/api/v2/dags/gpu/dagRuns/r1/taskInstances/train"] = {"state": None, "try_number": 1}
    api = AirflowApi(server, token=Answers.token)
    assert api.task_instance(TaskTry("gpu", "train", "r1", -1, 1)) == InstanceState(None, 1, None)
    assert api.task_instance(TaskTry("gpu", "train", "deleted-run", -1, 1)) is None


def test_a_404_that_is_not_airflows_stops_the_reaper(server: str) -> None:
    """A wrong URL prefix (a proxy's HTML 404) must not read as "every task instance is gone"."""
    Answers.plain_404 = True
    with pytest.raises(AirflowUnreachable, match="HTTP 404"):
        AirflowApi(server, token=Answers.token).task_instance(TaskTry("gpu", "train", "r1", -1, 1))


def test_a_dag_the_token_may_not_read_is_refused_not_gone(server: str) -> None:
    Answers.instances["/api/v2/dags/secret/dagRuns/r1/taskInstances/train"] = {"_status": 403, "detail": "Forbidden"}
    with pytest.raises(AirflowRefused, match="403"):
        AirflowApi(server, token=Answers.token).task_instance(TaskTry("secret", "train", "r1", -1, 1))


def test_wrong_credentials_and_no_server_are_unreachable(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowUnreachable, match="401"):
        AirflowApi(server, username="admin", password="wrong").check()
    monkeypatch.setattr(airflow_api, "FIRST_PAUSE", 0.01)
    with pytest.raises(AirflowUnreachable, match="not reachable"):
        AirflowApi(f"http://127.0.0.1:{free_port()}", token="t").check()

"""What Airflow says of a task instance now, through its public REST API (v2), as the UI asks it.

The REST API, not the metadata database: a platform team runs the reaper from a laptop or a
Kubernetes CronJob with an API token and no database credentials, the auth manager's per-DAG
permissions apply, and the answer is the api-server's, whatever database is behind it.

Authentication as the api-server requires it: a JWT in ``Authorization: Bearer``. Either the
token itself (``AIRFLOW_GPU_AIRFLOW_TOKEN``), or a user and password exchanged for one at
``POST /auth/token`` (the simple auth manager and FAB's both serve it).

Airflow that cannot be reached, or answers something other than Airflow's API, stops the reaper
before it deletes anything (``AirflowUnreachable``): without Airflow's answer every resource would
look like an orphan. ``GET /api/v2/version`` is asked first, with the credentials, so a wrong URL
or a refused token ends the run before any cloud is listed. A throttled or failing api-server
(429, 5xx, a reset) is asked again a few times first.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

from airflow_gpu.reap.rules import InstanceState, TaskTry

#: Tries of one request while the api-server answers 429/5xx or the connection fails, and the first pause.
ATTEMPTS, FIRST_PAUSE = 4, 1.0
TRANSIENT = frozenset({429, 500, 502, 503, 504})


class AirflowUnreachable(OSError):
    """Airflow did not answer as Airflow: nothing may be deleted on its silence."""


class AirflowRefused(Exception):
    """Airflow would not say (401/403: the credentials may not read this DAG): the resource is kept."""


class AirflowApi:
    """Task instance states from Airflow's REST API v2 (``url``: the api-server's base URL)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self._token, self.username, self.password = token, username, password
        self.timeout, self.sleep = timeout, sleep

    def check(self) -> str:
        """Airflow's version; raises ``AirflowUnreachable`` when the API does not answer as Airflow's."""
        answer = self._request("GET", "/api/v2/version")
        if not isinstance(answer, dict) or "version" not in answer:
            raise AirflowUnreachable(
                f"{self.url} answered /api/v2/version without a version: is it Airflow's api-server?"
            )
        return str(answer["version"])

    def task_instance(self, task: TaskTry) -> InstanceState | None:
        """The task instance's state and try number now; None when Airflow has no such task instance.
        Raises ``AirflowRefused`` when the credentials may not read it."""
        parts = [task.dag_id, "dagRuns", task.run_id, "taskInstances", task.task_id]
        if task.map_index >= 0:
            parts.append(str(task.map_index))
        path = "/api/v2/dags/" + "/".join(urllib.parse.quote(str(p), safe="") for p in parts)
        answer = self._request("GET", path, missing_ok=True)
        if answer is None:
            return None
        end = answer.get("end_date")
        return InstanceState(
            answer.get("state"),
            int(answer["try_number"]),
            datetime.fromisoformat(end.replace("Z", "+00:00")) if end else None,
        )

    # --- HTTP -------------------------------------------------------------------------------

    def _bearer(self) -> str:
        if self._token is None:
            if not self.username:
                raise AirflowUnreachable(
                    "no Airflow credentials: set AIRFLOW_GPU_AIRFLOW_TOKEN, or a user and password"
                )
            answer = self._request("POST", "/auth/token", {"username": self.username, "password": self.password or ""},
                                   auth=False)  # fmt: skip
            token = answer.get("access_token") if isinstance(answer, dict) else None
            if not token:
                raise AirflowUnreachable(f"{self.url}/auth/token gave no access_token")
            self._token = str(token)
        return self._token

    def _request(self, method: str, path: str, body: Any = None, *, auth: bool = True, missing_ok: bool = False) -> Any:
        """One call, asked again while it fails transiently. With ``missing_ok`` (a question about one task
        instance) a 404 from Airflow's API (a JSON ``detail``) is None and 401/403 ``AirflowRefused``;
        anything else that fails is ``AirflowUnreachable``."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._bearer()}"
        pause = FIRST_PAUSE
        for attempt in range(1, ATTEMPTS + 1):
            request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as error:
                detail = _detail(error)
                if error.code == 404 and missing_ok and detail is not None:
                    return None
                if error.code in (401, 403) and missing_ok:
                    raise AirflowRefused(f"Airflow refused to say (HTTP {error.code}: {detail})") from None
                if error.code not in TRANSIENT or attempt == ATTEMPTS:
                    raise AirflowUnreachable(
                        f"Airflow at {self.url} answered {method} {path} with HTTP {error.code}"
                        + (f": {detail}" if detail else "")
                    ) from None
                wait = _retry_after(error) or pause
            except (OSError, ValueError) as error:  # refused, reset, timed out, not JSON
                if attempt == ATTEMPTS:
                    raise AirflowUnreachable(
                        f"Airflow at {self.url} is not reachable ({type(error).__name__}: {error})"
                    ) from None
                wait = pause
            self.sleep(min(wait, 30.0))
            pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover


def _detail(error: urllib.error.HTTPError) -> str | None:
    """The ``detail`` of an Airflow API error body; None when the body is not Airflow's."""
    try:
        detail = json.loads(error.read() or b"{}").get("detail")
    except (ValueError, AttributeError, OSError):
        return None
    return None if detail is None else str(detail)


def _retry_after(error: urllib.error.HTTPError) -> float | None:
    try:
        return float(error.headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None

"""Task state store reads and writes that ride out a failed request (``airflow_gpu.utils.task_state``).

The store here is a fake of Airflow's ``TaskStateStoreAccessor`` (``get``/``set``), the boundary the
operators call; the errors it raises are the SDK's own (``AirflowRuntimeError`` around the
``ErrorResponse`` the supervisor sends back), shaped as the e2e stack's api-server produced them.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
from airflow.sdk.execution_time.comms import ErrorResponse

from airflow_gpu.utils import task_state

#: What the worker saw when the api-server answered a store read 404 without a JSON body.
BARE_404 = ErrorResponse(
    error=ErrorType.API_SERVER_ERROR,
    detail={"status_code": None, "message": "Client error '404 Not Found' for url '.../store/ti/x/k'"},
)
SERVER_ERROR = ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 500, "message": "Server error"})


class Store:
    def __init__(self, errors: list[ErrorResponse]) -> None:
        self.errors, self.values, self.calls = list(errors), {"k": {"v": 1}}, 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.errors:
            raise AirflowRuntimeError(self.errors.pop(0))

    def get(self, key: str) -> Any:
        self._maybe_fail()
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self._maybe_fail()
        self.values[key] = value


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_state, "FIRST_PAUSE", 0.0)


def test_a_bare_404_is_a_missing_key_not_a_failure() -> None:
    store = Store([BARE_404])
    assert task_state.read({"task_state_store": store}, "k") is None  # type: ignore[arg-type]
    assert store.calls == 1


def test_transient_errors_are_asked_again_for_reads_and_writes() -> None:
    store = Store([SERVER_ERROR, SERVER_ERROR])
    assert task_state.read({"task_state_store": store}, "k") == {"v": 1}  # type: ignore[arg-type]
    store = Store([SERVER_ERROR])
    assert task_state.write({"task_state_store": store}, "n", 2) is True  # type: ignore[arg-type]
    assert store.values["n"] == 2 and store.calls == 2


def test_an_error_that_persists_is_raised_and_a_404_on_write_is_not_swallowed() -> None:
    store = Store([SERVER_ERROR] * task_state.ATTEMPTS)
    with pytest.raises(AirflowRuntimeError):
        task_state.read({"task_state_store": store}, "k")  # type: ignore[arg-type]
    assert store.calls == task_state.ATTEMPTS
    store = Store([BARE_404] * task_state.ATTEMPTS)
    with pytest.raises(AirflowRuntimeError):
        task_state.write({"task_state_store": store}, "k", 1)  # type: ignore[arg-type]


def test_without_a_store_nothing_is_read_or_written() -> None:
    assert task_state.read({}, "k") is None  # type: ignore[arg-type]
    assert task_state.write({}, "k", 1) is False  # type: ignore[arg-type]

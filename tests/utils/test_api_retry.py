"""``api_retry``: what is asked again, how long it waits, and what it never retries (409, 404, 403)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from airflow_gpu.utils import api_retry


def error(status: int, retry_after: str | None = None, body: dict[str, Any] | None = None) -> ApiException:
    raised = ApiException(status=status, reason="x")
    raised.headers = {"Retry-After": retry_after} if retry_after else {}
    raised.body = json.dumps(body) if body else None
    return raised


@pytest.mark.parametrize(
    ("raised", "transient"),
    [(error(429), True), (error(500), True), (error(503), True), (error(504), True), (error(409), False),
     (error(404), False), (error(403), False), (ProtocolError("Connection aborted."), True),
     (ConnectionResetError(), True), (ValueError("bug"), False)],
)  # fmt: skip
def test_what_is_transient(raised: BaseException, transient: bool) -> None:
    assert api_retry.transient(raised) is transient


def test_retry_after_comes_from_the_header_or_the_status_body_on_429_and_503_only() -> None:
    assert api_retry.retry_after(error(429, "2")) == 2.0
    assert api_retry.retry_after(error(503, None, {"details": {"retryAfterSeconds": 3}})) == 3.0
    assert api_retry.retry_after(error(500, "2")) is None
    assert api_retry.retry_after(error(429, "3600")) == api_retry.MAX_RETRY_AFTER_SECONDS


def test_a_call_is_asked_again_honouring_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(api_retry.time, "sleep", slept.append)
    answers: list[BaseException | str] = [error(429, "2"), error(503), ProtocolError("reset"), "ok"]

    def fn() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert api_retry.call(fn, "reading pod x") == "ok"
    assert 2.0 <= slept[0] <= 2.4 and 2.0 <= slept[1] <= 2.4 and 4.0 <= slept[2] <= 4.8  # exponential by attempt


def test_a_conflict_or_a_spent_budget_is_raised() -> None:
    with pytest.raises(ApiException) as raised:
        api_retry.call(lambda: (_ for _ in ()).throw(error(409)), "creating pod x")
    assert raised.value.status == 409
    with pytest.raises(ApiException):  # Retry-After past the budget: no wait is started
        api_retry.call(lambda: (_ for _ in ()).throw(error(429, "5")), "reading pod x", budget=1)


def test_the_async_call_waits_too() -> None:
    calls = 0

    async def fn() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise error(429, "0")
        return calls

    assert asyncio.run(api_retry.acall(fn, "listing pods")) == 2

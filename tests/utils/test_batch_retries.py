"""``batch_retries``: which AWS errors are transient, what botocore is told to retry, and our rounds on top."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from airflow_gpu.utils import batch_retries


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize(
    ("raised", "transient", "throttled"),
    [
        (client_error("TooManyRequestsException", 429), True, True),
        (client_error("ThrottlingException", 400), True, True),
        (client_error("ServerException", 500), True, False),
        (client_error("ServiceUnavailable", 503), True, False),
        (client_error("ServiceUnavailableException", 500), True, False),
        (ConnectionClosedError(endpoint_url="http://x"), True, False),
        (ReadTimeoutError(endpoint_url="http://x"), True, False),
        (EndpointConnectionError(endpoint_url="http://x"), True, True),  # never reached the service
        (client_error("ClientException", 400), False, False),
        (client_error("ResourceNotFoundException", 400), False, False),
        (client_error("AccessDeniedException", 403), False, False),
        (ValueError("a bug"), False, False),
    ],
)
def test_what_is_transient_and_what_the_service_surely_did_not_act_on(
    raised: BaseException, transient: bool, throttled: bool
) -> None:
    assert batch_retries.transient(raised) is transient
    assert batch_retries.throttled(raised) is throttled


def test_our_retries_apply_unless_the_connection_sets_its_own() -> None:
    assert batch_retries.with_retries(None).retries == {"mode": "standard", "total_max_attempts": 10}
    kept = batch_retries.with_retries(Config(retries={"mode": "adaptive", "max_attempts": 3}, read_timeout=5))
    assert kept.retries == {"mode": "adaptive", "max_attempts": 3} and kept.read_timeout == 5
    merged = batch_retries.with_retries(Config(read_timeout=5))
    assert merged.retries == {"mode": "standard", "total_max_attempts": 10} and merged.read_timeout == 5
    once = batch_retries.without_retries(Config(retries={"mode": "adaptive", "max_attempts": 3}, read_timeout=5))
    assert once.retries == {"mode": "standard", "total_max_attempts": 1} and once.read_timeout == 5


def test_the_hooks_clients_retry_in_standard_mode_and_submit_job_s_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What botocore does with the clients (``meta.config``), from a connection without ``config_kwargs``,
    then from one that names its own retries (kept for every call but SubmitJob)."""
    from airflow_gpu.hooks.batch import GPUBatchHook

    connection: dict[str, Any] = {
        "conn_type": "aws",
        "login": "a",
        "password": "b",
        "extra": {"region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_PLAIN", json.dumps(connection))
    hook = GPUBatchHook(aws_conn_id="plain")
    assert hook.api.meta.config.retries == {"mode": "standard", "total_max_attempts": 10}
    assert hook._submit_api.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}
    job = {"container": {"logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-region": "eu-west-1"}}}}
    logs = hook.logs_client(job)
    assert logs.meta.config.retries == {"mode": "standard", "total_max_attempts": 10}
    assert logs.meta.region_name == "eu-west-1"
    connection["extra"]["config_kwargs"] = {"retries": {"mode": "adaptive", "max_attempts": 4}}
    monkeypatch.setenv("AIRFLOW_CONN_OWN", json.dumps(connection))
    own = GPUBatchHook(aws_conn_id="own")
    assert own.api.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 5}
    assert own._submit_api.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}


def test_a_transient_error_is_tried_again_for_a_few_rounds_and_any_other_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(batch_retries, "sleep", pauses.append)
    log = logging.getLogger("test")
    answers: list[Any] = [client_error("ServerException", 500), ConnectionClosedError(endpoint_url="x"), "done"]

    def call() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert batch_retries.retry_transient("Op", call, log) == "done"
    assert len(pauses) == 2 and 1 <= pauses[0] <= 2 and 2 <= pauses[1] <= 4
    answers[:] = [client_error("ServerException", 500)] * 5
    with pytest.raises(ClientError):
        batch_retries.retry_transient("Op", call, log, rounds=3)
    assert len(answers) == 2  # three rounds, then the error
    answers[:] = [client_error("ClientException", 400), "never"]
    with pytest.raises(ClientError):
        batch_retries.retry_transient("Op", call, log)
    assert answers == ["never"]

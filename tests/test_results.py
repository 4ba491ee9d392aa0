"""The result line both operators read from a workload's output."""

from __future__ import annotations

import pytest

from airflow_gpu.utils.results import ResultError, last_result


def test_the_last_result_line_wins() -> None:
    lines = ["epoch 1", '::airflow-gpu-result::{"loss": 2.0}', "epoch 2", '::airflow-gpu-result::{"loss": 1.0}']
    assert last_result(lines) == (True, {"loss": 1.0})
    assert last_result(["::airflow-gpu-result::null"]) == (True, None)  # a null result is still a result
    assert last_result(["no result here"]) == (False, None)


def test_a_result_that_is_not_json_is_an_error() -> None:
    with pytest.raises(ResultError, match="not JSON"):
        last_result(["::airflow-gpu-result::{loss: 1"])

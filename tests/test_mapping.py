"""``check_success_ratio``: the arithmetic behind the fan-out reduce step."""

from __future__ import annotations

import pytest

from airflow_gpu.utils.mapping import ShardReport, check_success_ratio


def test_enough_shards_pass() -> None:
    report = check_success_ratio(4, 5, 0.8)
    assert report == ShardReport(4, 5)
    assert str(report) == "4 of 5 shards succeeded (80%)"


@pytest.mark.parametrize(("succeeded", "total", "ratio"), [(3, 5, 0.8), (0, 5, 0.1), (0, 0, 0.5)])
def test_too_few_shards_fail_with_the_numbers(succeeded: int, total: int, ratio: float) -> None:
    with pytest.raises(ValueError, match=f"{succeeded} of {total} shards succeeded"):
        check_success_ratio(succeeded, total, ratio)


@pytest.mark.parametrize("ratio", [0, -0.5, 1.5])
def test_bad_ratio(ratio: float) -> None:
    with pytest.raises(ValueError, match="min_ratio must be in"):
        check_success_ratio(1, 1, ratio)

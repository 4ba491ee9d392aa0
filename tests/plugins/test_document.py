"""Reading documents defensively: a task may push any value as gpu_profile."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.plugins.document import (
    LARGEST,
    MAX_DEPTH,
    TaskEntry,
    clean,
    gpu_labels,
    interruption_count,
    number,
    sanitise,
    series,
    task_row,
)
from tests.plugins.profiles import document


def test_number_accepts_only_finite_ints_and_floats() -> None:
    assert [number(v) for v in (1, 2.5, True, "3", None, math.nan, math.inf, [1])] == [1.0, 2.5] + [None] * 6


def test_series_drops_points_without_a_time_and_aligns_the_rest() -> None:
    doc = {
        "series": [
            {"gpu": 1, "time": [10.0, "x", 12.0, None], "gpu_util": [1, 2, "bad", 4], "fb_used": [5.0]},
            {"gpu": 0, "time": [1.0, 2.0], "gpu_util": [math.inf, 3, 99]},  # a value too many: ignored
            {"gpu": "?", "time": [1.0]},  # no GPU index: skipped
            "not a series",
        ]
    }
    first, second = series(doc, ("gpu_util", "fb_used"))
    assert (first.gpu, first.times, first.values) == (0, [1.0, 2.0], {"gpu_util": [None, 3], "fb_used": [None, None]})
    assert (second.gpu, second.times) == (1, [10.0, 12.0])
    assert second.values == {"gpu_util": [1, None], "fb_used": [5.0, None]}


def test_gpu_labels_name_each_gpu_once() -> None:
    assert gpu_labels(document(2)) == {0: "GPU 0 · NVIDIA A10G", 1: "GPU 1 · NVIDIA A10G"}
    assert gpu_labels({"summary": [{"gpu": 3}], "gpus": "nope"}) == {3: "GPU 3"}


def test_interruptions_prefer_the_operators_records() -> None:
    assert interruption_count({"interruptions": 2}, None) == 2
    assert interruption_count({"interruptions": 2}, [{}]) == 1
    assert interruption_count({"interruptions": "2"}, "not a list") == 0


def test_a_row_for_a_value_that_is_not_a_profile() -> None:
    row = task_row(TaskEntry("t", 4, {"v": 2, "gpu_hours": 9}))
    assert (row["profiled"], row["gpu_hours"], row["map_index"]) == (False, None, 4)
    assert row["note"] == "gpu_profile is not a profile document"
    assert task_row(TaskEntry("t", -1, None, [{}]))["note"] == "no gpu_profile in XCom"


def test_number_refuses_what_would_overflow_the_pages_arithmetic() -> None:
    assert [number(v) for v in (LARGEST, -LARGEST, 10**400, -(10**5000), 2e15, 1e308)] == [LARGEST, -LARGEST] + [
        None
    ] * 4


def test_sanitise_makes_any_value_strict_json() -> None:
    value = {
        "v": 1,
        "nan": math.nan,
        "big": [10**400, -(10**5000), 1e308, 12, 2.5, True],  # past str's 4,300 digits: no json.dumps either
        "pair": (1, "x"),
        1: "an int key",  # what serde may hand over: JSON has string keys only
        "when": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "set": {1, 2},
        "deep": nested([], MAX_DEPTH + 5),
    }
    clean_value = sanitise(value)
    assert json.loads(json.dumps(clean_value, allow_nan=False)) == clean_value
    assert {k: v for k, v in clean_value.items() if k != "deep"} == {
        "v": 1, "nan": None, "big": [None, None, None, 12, 2.5, True], "pair": [1, "x"], "when": None, "set": None,
    }  # fmt: skip
    assert json.dumps(clean_value["deep"]).count("[") == MAX_DEPTH - 1  # cut where it gets too deep
    assert sanitise(document(2)) == document(2)  # a real document is left as it is


def nested(leaf: Any, depth: int) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def test_clean_sanitises_both_xcom_values_of_an_entry() -> None:
    entry = clean(TaskEntry("t", 2, {"v": 1, "gpu_hours": math.inf}, [{"at": math.nan}]))
    assert entry == TaskEntry("t", 2, {"v": 1, "gpu_hours": None}, [{"at": None}])

"""Reading documents defensively: a task may push any value as gpu_profile."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

from airflow_gpu.plugins import charts
from airflow_gpu.plugins.document import (
    LARGEST,
    MAX_DEPTH,
    RunEntry,
    TaskEntry,
    clean,
    clean_run,
    gpu_labels,
    interruption_count,
    number,
    profile_summary,
    sanitise,
    series,
    spark,
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
    row = task_row(RunEntry("t", 4, profile_summary({"v": 2, "gpu_hours": 9})))
    assert (row["profiled"], row["gpu_hours"], row["map_index"]) == (False, None, 4)
    assert row["note"] == "gpu_profile is not a profile document"
    assert task_row(RunEntry("t", -1, None, [{}]))["note"] == "no gpu_profile in XCom"
    # A gpu_profile_summary any task may push: not a summary, no figures.
    odd = task_row(RunEntry("t", 1, {"v": 2, "profiled": True, "gpu_hours": 9}))
    assert (odd["profiled"], odd["gpu_hours"]) == (False, None)
    assert odd["note"] == "gpu_profile_summary is not a summary (version 1)"


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


def _long_document(gpus: int, points: int) -> dict[str, Any]:
    """A document whose series are ``points`` long per GPU: the size the run page must not read."""
    doc = document(gpus)
    for entry in doc["series"]:
        entry["time"] = [1763900000.0 + 60 * i for i in range(points)]
        for name in ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock"):
            entry[name] = [float((i * 7 + entry["gpu"] * 13) % 100) for i in range(points)]
    return doc


def test_the_summary_is_small_and_holds_what_the_run_row_shows() -> None:
    doc = _long_document(8, 240)
    summary = profile_summary(doc)
    assert len(json.dumps(doc)) > 100_000 and len(json.dumps(summary, allow_nan=False)) < 1024
    assert "series" not in summary and summary["advice"] == 1 and summary["interruptions"] == 0
    row = task_row(RunEntry("score", 3, summary, [{"action": "resubmit"}]))
    assert {k: row[k] for k in ("profiled", "gpu_hours", "energy_wh", "util_mean", "cost_usd", "accelerator")} == {
        "profiled": True, "gpu_hours": 0.8, "energy_wh": 120.0, "util_mean": 61.0, "cost_usd": 2.27,
        "accelerator": "A10G:8",
    }  # fmt: skip
    assert (row["interruptions"], row["advice"], row["note"]) == (1, 1, None)


def test_the_summarys_sparkline_is_the_one_the_series_draw() -> None:
    """The run page draws the summary's slices: the same line as the whole series averaged over GPUs."""
    doc = _long_document(4, 240)
    times = [t for entry in doc["series"] for t in entry["time"]]
    values = [v for entry in doc["series"] for v in entry["gpu_util"]]
    drawn = charts.spark_svg(*spark(profile_summary(doc)))
    whole = charts.sparkline(times, values)
    assert drawn.startswith('<svg class="spark"')
    # Whole percents: within a sixth of a pixel of the line the series draw, point for point.
    ours, theirs = (re.findall(r"[\d.]+", re.search(r' d="([^"]*)"', svg)[1]) for svg in (drawn, whole))  # type: ignore[index]
    assert len(ours) == len(theirs) == 2 * 48
    assert max(abs(float(a) - float(b)) for a, b in zip(ours, theirs, strict=True)) <= 0.17


def test_a_sparse_sparkline_keeps_its_slice_numbers() -> None:
    """A slice without a sample is left out (the line joins its neighbours); a slice without a reading is a gap."""
    samples = {"gpu": 0, "time": [0.0, 1.0, 5.0, 9.0], "gpu_util": [10, 20, None, 40.4]}
    summary = profile_summary(document(1, series=[samples]))
    assert summary["spark"] == {"buckets": 4, "util": [15, None, 40], "at": [0, 2, 3]}
    assert spark(summary) == (4, [(0, 15.0), (2, None), (3, 40.0)])
    dense = profile_summary(document(1))["spark"]
    assert "at" not in dense and len(dense["util"]) == dense["buckets"] == 7


def test_a_malformed_summary_sparkline_is_left_out_not_an_error() -> None:
    assert spark({"spark": {"buckets": 10**6, "util": [1.0]}}) == (0, [])
    assert spark({"spark": {"buckets": 4, "util": [50, 1.0, 2, "y", 7], "at": [0, 9, 1.5, 2, "x"]}}) == (
        4,
        [(0, 50.0), (2, None)],
    )
    assert spark({"spark": {"buckets": 2, "util": "50"}}) == (2, [])
    assert spark(None) == (0, []) and charts.spark_svg(0, []) == ""


def test_clean_run_sanitises_a_summary_any_task_may_push() -> None:
    entry = clean_run(RunEntry("t", 0, {"v": 1, "profiled": True, "gpu_hours": math.nan}, None, True))
    assert entry == RunEntry("t", 0, {"v": 1, "profiled": True, "gpu_hours": None}, None, True)
    assert task_row(entry)["gpu_hours"] is None

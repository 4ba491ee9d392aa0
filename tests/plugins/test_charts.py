"""Inline SVG charts: bounded, gapped where a reading is missing, escaped."""

from __future__ import annotations

import re

import pytest

from airflow_gpu.plugins import charts


def test_decimate_bounds_a_day_at_one_hertz_and_keeps_the_mean_or_the_peak() -> None:
    times = [float(t) for t in range(86_400)]
    values: list[float | None] = [float(t % 100) for t in range(86_400)]
    t, v = charts.decimate(times, values, 500)
    assert len(t) == len(v) == 500  # buckets of ceil(86400 / 500) = 173 samples
    assert sum(x for x in v if x is not None) / len(v) == pytest.approx(49.5, abs=0.5)
    _, peaks = charts.decimate(times, values, 500, peak=True)
    assert max(p for p in peaks if p is not None) == 99.0
    assert charts.decimate(times[:10], values[:10], None) == (times[:10], values[:10])
    assert charts.decimate([1.0, 2.0, 3.0, 4.0], [None, None, 5.0, None], 2) == ([1.5, 3.5], [None, 5.0])


def test_y_axis_ends_on_a_round_number_in_at_most_five_steps() -> None:
    assert charts.y_axis(100) == (100, 20)
    assert charts.y_axis(22.5) == (25, 5)
    assert charts.y_axis(210) == (250, 50)
    assert charts.y_axis(7) == (8, 2)
    assert charts.y_axis(0) == (1.0, 0.25)  # nothing measured: an axis all the same


def _paths(svg: str) -> list[str]:
    return re.findall(r'<path class="s\d" d="([^"]*)"', svg)


def test_one_path_per_series_with_a_gap_for_a_missing_reading() -> None:
    series = [
        charts.Series("GPU 0", [0.0, 1.0, 2.0, 3.0], [10.0, None, 30.0, 40.0]),
        charts.Series("GPU 1", [0.0, 1.0, 2.0, 3.0], [None, None, None, None]),  # no reading at all: no line
        charts.Series("GPU 2", [0.0, 3.0], [100.0, 0.0]),
    ]
    svg = charts.line_chart("Utilisation", "%", series, y_at_least=100.0)
    paths = _paths(svg)
    assert len(paths) == 2
    assert paths[0].count("M") == 2 and paths[0].count("L") == 1
    assert paths[1] == "M48.0 10.0L690.0 176.0"  # plot area: x 48..690, y 10 (100 %) .. 176 (0 %)
    assert svg.count("<li>") == 3  # the legend names every series, drawn or not


def test_the_bound_caps_every_line_and_none_draws_every_point() -> None:
    times = [float(t) for t in range(5000)]
    line = charts.Series("GPU 0", times, [float(t % 7) for t in range(5000)])
    bounded = _paths(charts.line_chart("Power", "W", [line]))[0]
    assert bounded.count("L") + bounded.count("M") <= charts.MAX_POINTS
    naive = _paths(charts.line_chart("Power", "W", [line], bound=None))[0]
    assert naive.count("L") + naive.count("M") == 5000


def test_labels_are_escaped_inside_the_svg_and_the_legend() -> None:
    svg = charts.line_chart("A <b>", "<i>", [charts.Series("<script>x</script>", [0.0, 1.0], [1.0, 2.0])])
    assert "<script" not in svg and "<b>" not in svg and "<i>" not in svg
    assert "<title>&lt;script&gt;x&lt;/script&gt;</title>" in svg and "A &lt;b&gt; (&lt;i&gt;)" in svg


def test_time_axis_labels_elapsed_time() -> None:
    day = charts.line_chart("U", "%", [charts.Series("g", [0.0, 86_400.0], [1.0, 2.0])])
    assert re.findall(r'text-anchor="middle">([^<]*)<', day) == [
        "0:00:00",
        "6:00:00",
        "12:00:00",
        "18:00:00",
        "24:00:00",
    ]
    assert charts.elapsed(90, 600) == "1:30" and charts.elapsed(3725, 7200) == "1:02:05"


def test_sparkline_averages_gpus_in_time_slices() -> None:
    # Two GPUs at 0 % and 100 % at the same times: one line at 50 %, the middle of the 24-pixel box.
    spark = charts.sparkline([0.0, 10.0, 0.0, 10.0], [0.0, 0.0, 100.0, 100.0], buckets=2)
    assert _paths(spark) == ["M30.5 12.0L89.5 12.0"]
    assert charts.sparkline([], []) == "" and charts.sparkline([1.0], [None]) == ""


def test_a_short_run_draws_a_connected_sparkline() -> None:
    """9 samples (a few seconds' task): one slice each, whatever the jitter or spacing; a missing reading is a gap."""
    values: list[float | None] = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]
    for times in (
        [float(t) for t in range(9)],
        [0.0, 1.02, 1.97, 3.1, 3.9, 5.0, 6.13, 6.9, 8.0],  # a sampler's jitter
        [0.0, 0.1, 0.2, 4.0, 4.1, 7.9, 7.95, 7.99, 8.0],  # uneven: several slices without a sample
    ):
        [line] = _paths(charts.sparkline(times, values))
        assert line.count("M") == 1 and 1 <= line.count("L") <= 8, (times, line)
    gapped = _paths(charts.sparkline([float(t) for t in range(9)], [*values[:4], None, *values[5:]]))[0]
    assert gapped.count("M") == 2 and gapped.count("L") == 6
    # Two GPUs sampled at the same 9 times: 9 slices, not 18.
    two = _paths(charts.sparkline([float(t) for t in range(9)] * 2, values + values))[0]
    assert two.count("M") == 1 and two.count("L") == 8


def test_axes_of_tiny_or_huge_values_do_not_fail() -> None:
    assert charts.y_axis(5e-324) == charts.y_axis(1e-9) == charts.y_axis(float("inf")) == (1.0, 0.25)
    assert charts.y_axis(1e15) == (1e15, 2e14)
    huge = charts.line_chart("U", "%", [charts.Series("g", [-1e15, 1e15], [1e15, 5e-324])], start=1e15, end=-1e15)
    assert len(_paths(huge)) == 1

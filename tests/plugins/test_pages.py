"""The report's pages rendered from documents whose figures are known, hostile ones included."""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu.plugins import pages
from airflow_gpu.plugins.document import RunEntry, profile_summary, rollup
from airflow_gpu.profiling import marker
from airflow_gpu.profiling.report import build_profile
from airflow_gpu.profiling.samples import Sample
from airflow_gpu.profiling.summary import summarise
from tests.plugins.profiles import PRICES_SOURCE, STARTED, document, empty_document
from tests.properties import examples

SCRIPT = "<script>alert(1)</script>"
BASE = "/gpu-profile"


def _task(value: Any, task_id: str = "train", map_index: int = -1, **kwargs: Any) -> str:
    return pages.task_page(
        value, dag_id="gpu_dag", run_id="manual__1", task_id=task_id, map_index=map_index, base=BASE, **kwargs
    )


def _svgs(html: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)


def test_task_page_shows_the_documents_figures() -> None:
    html = _task(document(2), interruptions=[{"action": "resubmit"}])
    cards = {label: value for value, label in re.findall(r'<div class="card"><b>(.*?)</b><span>(.*?)</span>', html)}
    assert cards == {
        "GPU-hours": "0.20",
        "duration": "6 min 00 s",
        "mean utilisation": "61.0%",
        "energy": "30.0 Wh",
        "estimated cost": "$2.27",
        "interruptions": "1",  # the operator's records win over the document's count of 0
        "accelerator": "A10G:2",
    }
    assert "<td class=n>61.0%</td><td class=n>93.0%</td><td class=n>25%</td>" in html  # per GPU
    assert "12.0 GiB / 22.5 GiB" in html and "150 W / 210 W" in html and "15.0 Wh (counter)" in html
    assert "<tr><th>List prices of</th><td>2026-11-01</td></tr>" in html
    assert f'<a href="{PRICES_SOURCE}" target="_blank" rel="noopener noreferrer">' in html
    assert "$5.672 per hour" in html and "2 of 4 GPUs of g5.12xlarge for 0.10 h" in html
    assert "<tr><th>Driver</th><td>550.54.15</td></tr><tr><th>CUDA</th><td>12.4</td></tr>" in html
    assert "<th>GPU1</th><td>NV12</td><td>X</td>" in html  # the topology matrix
    assert "Peak memory 12 GiB fits an L4 (24 GB)." in html
    assert "2025-11-23 12:13:20 UTC" in html and "SIGTERM" in html
    assert 'href="/gpu-profile/dags/gpu_dag/runs/manual__1"' in html  # the run page
    assert 'href="/gpu-profile/api/dags/gpu_dag/runs/manual__1/tasks/train?map_index=-1"' in html


def test_task_page_draws_utilisation_memory_and_power_one_line_per_gpu() -> None:
    html = _task(document(3))
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", html)
    assert captions == ["GPU utilisation (%)", "Memory used (GiB)", "Power (W)"]
    for svg in _svgs(html):
        assert len(re.findall(r'<path class="s\d"', svg)) == 3
        assert "<title>GPU 2 · NVIDIA A10G</title>" in svg
    utilisation = _svgs(html)[0]
    first_line = re.search(r'<path class="s0" d="([^"]*)"', utilisation)
    assert first_line is not None and first_line.group(1).count("M") == 2  # the missing reading is a gap
    assert ">100</text>" in utilisation and ">6:00</text>" in utilisation  # 0-100 %, six minutes
    assert ">25</text>" in _svgs(html)[1]  # the memory axis reaches the 22.5 GiB the GPU has
    assert "<script" not in html  # the page needs no script, and forbids them (see the app's CSP)


def test_everything_from_the_dag_or_the_workload_is_escaped_in_html_and_svg() -> None:
    doc = document(
        1,
        name=SCRIPT,
        note=SCRIPT,
        workload=SCRIPT,
        advice=[{"kind": SCRIPT, "message": SCRIPT, "detail": {}}],
        topology={"gpus": [SCRIPT], "matrix": [[SCRIPT]]},
    )
    doc["gpus"][0]["uuid"] = SCRIPT
    doc["summary"][0]["uuid"] = SCRIPT
    doc["cost"]["source"] = "javascript:alert(1)"
    doc["cost"]["basis"] = SCRIPT
    html = _task(doc, task_id=SCRIPT)
    assert "<script" not in html
    assert "javascript:" not in html.replace("<td>javascript:alert(1)</td>", "")  # shown as text, never a link
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"<title>GPU profile: {escaped}</title>" in html and f"<h1>GPU profile: {escaped}</h1>" in html
    assert all(f"<title>GPU 0 · {escaped}</title>" in svg for svg in _svgs(html))  # inside the SVG
    assert f"GPU 0 · {escaped}</li>" in html  # the legend
    unpriced = _task(document(1, cost=None, cost_note=SCRIPT))
    assert "<script" not in unpriced and f"No estimate: {escaped}." in unpriced
    mapped = pages.map_index_page("d", "r", SCRIPT, [0, 1], BASE)
    assert "<script" not in mapped and 'href="/gpu-profile/dags/d/runs/r/tasks/%3Cscript%3E' in mapped


def test_an_empty_profile_says_why_and_draws_no_chart() -> None:
    html = _task(empty_document("nvidia-smi not found"))
    assert "This task ran without a GPU profile: nvidia-smi not found." in html
    assert not _svgs(html) and "No estimate" not in html


def test_a_task_without_a_profile_gets_the_empty_state() -> None:
    html = pages.missing_page("d", "r", "t", -1, BASE)
    assert "No GPU profile for this task instance." in html and "gpu_profile=False" in html


def test_a_value_that_is_not_a_profile_is_said_so() -> None:
    for value in ("s3://bucket/xcom/ref", {"v": 2}, [1, 2], 3):
        assert "is not a GPU profile document" in _task(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
FIELDS = [*document(), "cost_note"]


@settings(max_examples=examples(150), deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), st.booleans())
def test_any_document_renders_without_raising(overrides: dict[str, Any], bad_series: bool) -> None:
    """A task can push any value as gpu_profile: a mistyped field is a dash, never an error page."""
    doc = document(1, **overrides)
    if bad_series:
        doc["series"] = [{"gpu": "x", "time": [1.0]}, {"gpu": 0, "time": ["a", None, 2.0], "gpu_util": ["b", 3]}]
    assert _task(doc).startswith("<!doctype html>")
    entries = [RunEntry("t", -1, profile_summary(doc), overrides.get("signals"))]
    assert pages.run_page(rollup("d", "r", entries), entries, BASE).startswith("<!doctype html>")


def test_a_mapped_task_without_map_index_lists_its_instances() -> None:
    html = pages.map_index_page("d", "manual__2026-11-23T15:00:00+00:00", "score", [0, 1, 2], BASE)
    links = re.findall(r'href="([^"]*)">score \[(\d)\]', html)
    run = "manual__2026-11-23T15%3A00%3A00%2B00%3A00"
    assert links == [(f"/gpu-profile/dags/d/runs/{run}/tasks/score?map_index={i}", str(i)) for i in range(3)]


def _shards() -> list[RunEntry]:
    """The run page's entries: each instance's summary, as the operator pushes it beside the document."""
    busy = document(1, util_mean=90.0, gpu_hours=1.0, energy_wh=300.0, interruptions=1)
    idle = document(2, util_mean=30.0, gpu_hours=3.0, energy_wh=None, cost=None)
    return [
        RunEntry("score", 0, profile_summary(busy)),
        RunEntry("score", 1, profile_summary(idle), [{"action": "resubmit"}, {"action": "retried-by-platform"}]),
        RunEntry("score", 2, profile_summary(empty_document())),
        RunEntry("train", -1, profile_summary(document(4))),
        RunEntry("prepare", -1, None, [{"action": "fail"}]),  # interrupted, never profiled
    ]


def test_the_run_roll_up_adds_up_the_task_instances() -> None:
    totals = rollup("d", "r", _shards())["totals"]
    assert totals["task_instances"] == 4
    assert totals["gpu_hours"] == 1.0 + 3.0 + 0.0 + 0.4
    assert (totals["energy_wh"], totals["energy_task_instances"]) == (300.0 + 60.0, 2)
    assert (totals["cost_usd"], totals["cost_task_instances"]) == (2.27 * 2, 2)
    assert totals["util_mean"] == (90.0 * 1.0 + 30.0 * 3.0 + 61.0 * 0.4) / 4.4  # weighted by GPU-hours
    assert totals["interruptions"] == 1 + 2 + 0 + 0 + 1  # the records where there are some, else the count


def test_the_run_page_puts_mapped_shards_side_by_side() -> None:
    entries = _shards()
    html = pages.run_page(rollup("d", "r", entries), entries, BASE)
    assert '<tr class="group"><th colspan="11">score: 3 mapped instances, 4.00 GPU-hours</th></tr>' in html
    rows = re.findall(r'<tr><td><a href="([^"]*)">([^<]*)</a></td>', html)
    assert rows == [
        ("/gpu-profile/dags/d/runs/r/tasks/prepare?map_index=-1", "prepare"),
        *[(f"/gpu-profile/dags/d/runs/r/tasks/score?map_index={i}", f"score [{i}]") for i in range(3)],
        ("/gpu-profile/dags/d/runs/r/tasks/train?map_index=-1", "train"),
    ]
    assert len(re.findall(r'<svg class="spark"', html)) == 3  # every instance with a series
    assert "4.40" in html and "$4.54" in html and "estimated cost (2 of 4 task instances)" in html
    assert "no gpu_profile in XCom" in html and "no NVIDIA driver" in html
    assert "Costs from list prices: 2026-11-01," in html


def test_a_run_without_profiles_gets_the_empty_state() -> None:
    html = pages.run_page(rollup("d", "r", []), [], BASE)
    assert "No task instance of this run has a GPU profile." in html and "<table>" not in html


def test_formatting() -> None:
    assert pages.fmt_duration(3725) == "1 h 02 min" and pages.fmt_duration(42) == "42 s"
    assert pages.fmt_energy(1500) == "1.50 kWh" and pages.fmt_usd(1234.5) == "$1,234.50"
    assert pages.fmt(None) == pages.DASH == pages.fmt("61") == pages.fmt(True) == pages.fmt(float("nan"))


def test_the_page_reads_what_the_worker_writes() -> None:
    """Samples -> the container's payload (``marker.fit``) -> the worker's ``build_profile`` -> the page."""
    samples = [
        Sample(STARTED + t, gpu, f"GPU-{gpu}", "NVIDIA A10G", gpu_util=90.0 if gpu == 0 else 2.0, fb_used=9000.0,
               fb_total=23028.0, power_usage=200.0 - 100 * gpu)
        for gpu in range(2)
        for t in range(600)
    ]  # fmt: skip
    payload: dict[str, Any] = {
        "v": 1, "source": "nvml", "note": None, "interval": 1.0, "started": STARTED, "ended": STARTED + 600,
        "exit_code": 0, "signals": [], "spot_notice": None, "driver": "550.54.15", "cuda": "12.4",
        "gpus": [{"index": g, "uuid": f"GPU-{g}", "name": "NVIDIA A10G", "fb_total": 23028.0} for g in range(2)],
        "topology": None, "summary": [s.to_json() for s in summarise(samples)], "samples_taken": len(samples),
    }  # fmt: skip
    doc = build_profile(
        json.loads(marker.fit(payload, samples)),
        accelerator="A10G:2",
        capacity="spot",
        backend="batch",
        workload="job-1",
        instance_type="g5.12xlarge",
        interruptions=0,
        warning=None,
    )
    html = _task(doc)
    assert f"<b>{doc['gpu_hours']:.2f}</b><span>GPU-hours</span>" in html
    assert f"<b>{pages.fmt_usd(doc['cost']['usd'])}</b><span>estimated cost</span>" in html
    assert f"<td>{doc['cost']['prices_date']}</td>" in html and doc["advice"]
    assert all(escape(a["message"]) in html for a in doc["advice"])
    assert [len(re.findall(r'<path class="s\d"', svg)) for svg in _svgs(html)] == [2, 2, 2]

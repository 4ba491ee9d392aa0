"""The marker for real: the writer's chunks, cap and downsampling, and every reason the strict reader
refuses a log. No fakes: payloads and samples are made here, logs are lists of lines."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.profiling import marker
from airflow_gpu.profiling.marker import CHUNK_CHARS, MAX_PAYLOAD_BYTES, PROFILE_MARKER, read_profile, render
from airflow_gpu.profiling.samples import Sample

LOG = ["Epoch 1/3: loss 0.41", "Epoch 2/3: loss 0.22", "Epoch 3/3: loss 0.17"]


def base(**fields: Any) -> dict[str, Any]:
    return {"v": 1, "source": "nvml", "note": None, "interval": 1.0, "exit_code": 0, "signals": [], **fields}


def samples(gpus: int, seconds: int) -> list[Sample]:
    return [
        Sample(
            time=1_763_900_000.0 + t,
            gpu=g,
            uuid=f"GPU-{g}",
            name="NVIDIA H100 80GB HBM3",
            gpu_util=float(t % 101),
            mem_copy_util=12.5,
            fb_used=40_000.0 + t % 977,
            fb_total=81_559.0,
            power_usage=312.45 + g,
            gpu_temp=61.0,
            sm_clock=1980.0,
        )
        for g in range(gpus)
        for t in range(seconds)
    ]


def test_a_payload_round_trips_through_the_end_of_a_log() -> None:
    lines = render(base(), samples(2, 100))
    assert len(lines) == 3 and all(line.startswith(PROFILE_MARKER) for line in lines)
    payload, why = read_profile([*LOG, *lines, "", "  "])  # blank lines after the marker are allowed
    assert why is None and payload is not None
    assert payload["series_points"] == 240 and [s["gpu"] for s in payload["series"]] == [0, 1]
    series = payload["series"][0]
    assert series["time"][:2] == [1_763_900_000, 1_763_900_001] and series["power_usage"][0] == 312.4  # rounded
    assert len(series["gpu_util"]) == 100 and set(series) == {"gpu", "time", *marker.SERIES_FIELDS}
    assert read_profile([f"{line}\r\n" for line in [*LOG, *lines]])[0] == payload  # CRLF logs read the same


def test_the_series_is_halved_until_the_payload_fits_the_cap() -> None:
    """16 GPUs for an hour at 1 Hz: 57,600 samples; 240 points per GPU would be about 140 KB."""
    lines = render(base(), samples(16, 3600))
    payload, why = read_profile(lines)
    assert why is None and payload is not None
    text = "".join(line.split("::", 3)[3] for line in lines)
    assert len(text) <= MAX_PAYLOAD_BYTES and all(len(line) <= len(PROFILE_MARKER) + 16 + CHUNK_CHARS for line in lines)
    assert payload["series_points"] == 120  # 240 halved once
    assert all(len(s["time"]) == payload["series_points"] for s in payload["series"])
    # a memory spike survives the downsampling: fb_used keeps each bucket's peak
    assert max(payload["series"][0]["fb_used"]) == 40_976
    assert len(marker.dumps({**base(), "series": marker.series(samples(16, 3600), 240)})) > MAX_PAYLOAD_BYTES


def test_what_does_not_fit_even_without_a_series_keeps_the_outcome() -> None:
    payload, why = read_profile(render(base(exit_code=3, note="x" * (MAX_PAYLOAD_BYTES + 1)), samples(1, 10)))
    assert why is None and payload is not None
    assert payload["exit_code"] == 3 and payload["series"] == [] and "larger than" in payload["note"]


def test_non_finite_numbers_are_written_as_null() -> None:
    payload, _ = read_profile(render(base(summary=[{"util_mean": float("nan"), "power_peak": float("inf")}]), []))
    assert payload is not None and payload["summary"] == [{"util_mean": None, "power_peak": None}]
    assert payload["series"] == [] and payload["series_points"] == 240


@given(
    note=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200),
    spaces=st.integers(0, 9000),
    repeat=st.integers(1, 40),
)
def test_any_note_round_trips_and_no_chunk_ends_in_whitespace(note: str, spaces: int, repeat: int) -> None:
    """Runs of spaces longer than a chunk included: the one place a chunk could end in whitespace."""
    sent = base(note=" " * spaces + note * repeat)
    lines = render(sent, [])
    assert all(not line[-1].isspace() and len(line.split("::", 3)[3]) <= CHUNK_CHARS for line in lines)
    assert all(line.isascii() for line in lines)
    payload, why = read_profile([line.rstrip() for line in [*LOG, *lines]])  # a pipeline that strips lines
    assert why is None and payload == {**sent, "series": [], "series_points": 240}


def test_a_run_of_spaces_longer_than_a_chunk_is_split_on_an_escaped_space() -> None:
    sent = base(note="a" + " " * 8500 + "b")
    lines = render(sent, [])
    assert any(line.endswith("\\u0020") for line in lines) and all(
        len(line.split("::", 3)[3]) <= CHUNK_CHARS for line in lines
    )
    assert read_profile(lines) == ({**sent, "series": [], "series_points": 240}, None)


def test_a_payload_at_the_budget_full_of_space_runs_still_takes_at_most_max_chunks() -> None:
    """The worst case for chunking: runs of spaces at every chunk boundary, the JSON at the budget."""
    for run in (1, marker.SPACES_CUT, marker.SPACES_CUT + 1, 3000):
        sent = base(note=("x" * (CHUNK_CHARS - run // 2) + " " * run) * 30)
        sent["note"] = sent["note"][: len(sent["note"]) - (len(marker.dumps(sent)) - marker.BUDGET)]
        text = marker.dumps(sent)
        assert len(text) == marker.BUDGET
        lines = marker.chunk(text)
        assert len(lines) <= marker.MAX_CHUNKS and all(not line.endswith(" ") for line in lines)
        assert read_profile(lines) == (sent, None)


def forged(text: str, total: int | None = None, index: int = 1) -> str:
    return f"{PROFILE_MARKER}{index}/{total or 1}::{text}"


THREE = render(base(note="n" * 9000), [])  # three chunks


@pytest.mark.parametrize(
    ("log", "why"),
    [
        (LOG, "no GPU profile marker in the log"),
        ([*LOG, *THREE, "done"], "in the middle of the log"),
        ([*THREE, *LOG, *THREE], "in the middle of the log"),  # a workload's copy mid-log spoils the real one
        ([*LOG, THREE[0], THREE[2]], "chunk 2 of 3 is missing"),
        ([*LOG, THREE[0], THREE[1], THREE[1], THREE[2]], "chunk 2 appears more than once"),
        ([*LOG, THREE[1], THREE[0], THREE[2]], "out of order"),
        ([*LOG, *THREE, *THREE], "appears more than once"),
        ([*LOG, THREE[0], "", THREE[1], THREE[2]], "not contiguous"),
        ([*LOG, THREE[0], THREE[1], forged("}", 4, 3)], "of different profiles"),
        ([*LOG, forged('{"v": 1}', 1, 0)], "outside 1..1"),
        ([*LOG, forged('{"v": 1}', 1, 2)], "outside 1..1"),
        ([*LOG, f"{PROFILE_MARKER}one/1::{{}}"], "malformed"),
        ([*LOG, forged("{not json")], "not valid JSON"),
        ([*LOG, forged('{"v": NaN}')], "not valid JSON"),
        ([*LOG, forged("[1, 2]")], "not a JSON object"),
        ([*LOG, forged('{"v": 2}')], "has version 2"),
        ([*LOG, forged('{"v": 1, "note": "' + "x" * CHUNK_CHARS + '"}')], "longer than 4000"),
        ([*LOG, *(forged("x" * CHUNK_CHARS, 25, i) for i in range(1, 26))], "larger than the 98304-byte cap"),
        ([*LOG, *(forged("{}", 40, i) for i in range(1, 41))], "exceed the 98304-byte cap"),
        ([*LOG, forged("{}", 40, 1)], "says 40 chunks"),
    ],
)
def test_the_reader_refuses_anything_but_one_complete_run_at_the_end(log: list[str], why: str) -> None:
    payload, reason = read_profile(log)
    assert payload is None and reason is not None and why in reason


def test_the_reader_streams_a_long_log() -> None:
    """A long log is read once, line by line: a generator is enough."""
    lines = render(base(), samples(1, 5))
    payload, why = read_profile(f"step {i}" for i in range(200_000))
    assert payload is None and why == "no GPU profile marker in the log"
    payload, why = read_profile(iter([*(f"step {i}" for i in range(200_000)), *lines]))
    assert why is None and payload is not None and payload["source"] == "nvml"
    assert json.loads(marker.fit(base(), samples(1, 5)))["series_points"] == 240

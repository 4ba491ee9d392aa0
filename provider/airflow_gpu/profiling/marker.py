"""The profile's way out of the container: marker lines at the end of its log, and their strict reader.

The entrypoint prints the payload JSON as ``::airflow-gpu-profile::<i>/<n>::<chunk>`` lines, chunks
of at most ``CHUNK_CHARS`` characters: Docker and containerd split log lines at 16 KiB and
CloudWatch caps an event at 256 KiB, so no chunk is ever cut in two on its way to the worker. The
whole payload is at most ``MAX_PAYLOAD_BYTES`` (the JSON is ASCII, so characters are bytes); its
series is downsampled, halving the points per GPU, until it fits.

The reader trusts nothing it did not have to: the workload writes to the same log, so a marker it
printed itself (mid-log, out of order, doubled, oversized) must not become the profile. It accepts
only one complete run 1..n at the very end of the log (blank lines after it allowed); anything else
is ``(None, why)``, and the caller logs ``why`` while the task's outcome stands.

Shipped into the container: standard library and ``airflow_gpu.profiling`` only, Python 3.8.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import TYPE_CHECKING, Any

from airflow_gpu.profiling.samples import Sample, downsample

#: What every marker line starts with (``utils.results.RESULT_MARKER``'s sibling).
PROFILE_MARKER = "::airflow-gpu-profile::"
#: Characters of payload JSON per marker line (a line stays far below Docker's 16 KiB split).
CHUNK_CHARS = 4000
#: The cap on the payload JSON, in bytes (= characters: it is ASCII).
MAX_PAYLOAD_BYTES = 96 * 1024
#: Chunks a payload within the cap can take.
MAX_CHUNKS = math.ceil(MAX_PAYLOAD_BYTES / CHUNK_CHARS)
#: What ``fit`` allows itself: room for ``chunk``'s escaped spaces (5 more bytes at most per chunk).
BUDGET = MAX_PAYLOAD_BYTES - 5 * MAX_CHUNKS
#: The most trailing spaces ``chunk`` moves to the next chunk rather than escaping one.
SPACES_CUT = 64
#: Points per GPU the series starts from; halved until the payload fits.
SERIES_POINTS = 240
VERSION = 1
#: The series' columns, beside ``time``: the measures the report charts (``Sample``'s names).
SERIES_FIELDS = ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock")

_LINE = re.compile(r"::airflow-gpu-profile::([0-9]{1,6})/([0-9]{1,6})::(.*)\Z", re.DOTALL)

if TYPE_CHECKING:  # only in annotations: Python 3.8, which runs this module, cannot subscript dict
    Result = tuple[dict[str, Any] | None, str | None]


def _number(value: float | None, digits: int) -> float | int | None:
    """Rounded, integral values as ints and non-finite ones as None: fewer bytes, valid JSON."""
    if value is None or not math.isfinite(value):
        return None
    rounded = round(value, digits)
    return int(rounded) if rounded == int(rounded) else rounded


def series(samples: Sequence[Sample], points: int) -> list[dict[str, Any]]:
    """Per GPU, columns of at most ``points`` values (``downsample``'s buckets); none when ``points`` is 0."""
    if points < 1:
        return []
    result: list[dict[str, Any]] = []
    for gpu, group in groupby(downsample(samples, points), key=lambda s: s.gpu):
        rows = list(group)
        column: dict[str, Any] = {"gpu": gpu, "time": [_number(s.time, 3) for s in rows]}
        for name in SERIES_FIELDS:
            column[name] = [_number(getattr(s, name), 1) for s in rows]
        result.append(column)
    return result


def _clean(value: Any) -> Any:
    """The payload with NaN and infinities as None: ``json.loads`` elsewhere (and browsers) reject them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(payload: Mapping[str, Any]) -> str:
    """Compact ASCII JSON: one character is one byte, so the cap is checked on ``len``."""
    return json.dumps(_clean(payload), separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def fit(payload: Mapping[str, Any], samples: Sequence[Sample], points: int = SERIES_POINTS) -> str:
    """The payload JSON with ``series`` and ``series_points`` added, halving the points until it fits.

    If it does not fit even without a series (a huge note, hundreds of GPUs), what is left is the
    run's outcome with a note saying so, rather than no profile at all.
    """
    while True:
        text = dumps({**payload, "series": series(samples, points), "series_points": points})
        if len(text) <= BUDGET:
            return text
        if points == 0:
            break
        points //= 2
    kept = {k: payload.get(k) for k in ("v", "source", "interval", "started", "ended", "exit_code", "signals")}
    kept["spot_notice"] = str(payload.get("spot_notice") or "")[:64] or None
    note = f"the profile is larger than {MAX_PAYLOAD_BYTES} bytes even without its series; only the outcome is kept"
    return dumps({**kept, "note": note, "series": [], "series_points": 0, "summary": [], "gpus": []})


def chunk(text: str) -> list[str]:
    """The marker lines for a payload JSON. No chunk ends in a space (a log pipeline may strip it).

    A chunk that would end in a few spaces ends before them; one that would end in a long run of
    them writes its last one as ``\\u0020``, the same JSON string (compact JSON has raw spaces only
    inside strings, and a space is never part of an escape). So every chunk but the last carries at
    least ``CHUNK_CHARS - SPACES_CUT`` characters, and a payload within ``BUDGET`` takes at most
    ``MAX_CHUNKS`` chunks.
    """
    if len(text) > BUDGET:
        raise ValueError(f"a profile payload is at most {BUDGET} bytes before chunking, this one is {len(text)}")
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + CHUNK_CHARS, len(text))
        piece = text[start:end]
        if end < len(text) and piece.endswith(" "):
            kept = piece.rstrip(" ")
            if len(piece) - len(kept) <= SPACES_CUT:
                piece, end = kept, start + len(kept)
            else:
                end = start + CHUNK_CHARS - 5
                piece = text[start : end - 1] + "\\u0020"
        pieces.append(piece)
        start = end
    return [f"{PROFILE_MARKER}{i}/{len(pieces)}::{piece}" for i, piece in enumerate(pieces, 1)]


def render(payload: Mapping[str, Any], samples: Sequence[Sample], points: int = SERIES_POINTS) -> list[str]:
    """What the entrypoint prints: ``chunk(fit(payload, samples, points))``."""
    return chunk(fit(payload, samples, points))


def _order(indices: list[int], total: int) -> str | None:
    """Why ``indices`` (in log order) are not exactly 1..total, or None."""
    outside = [i for i in indices if not 1 <= i <= total]
    if outside:
        return f"GPU profile marker chunk {outside[0]} is outside 1..{total}"
    doubled = sorted({i for i in indices if indices.count(i) > 1})
    if doubled:
        return f"GPU profile marker chunk {doubled[0]} appears more than once"
    if indices != sorted(indices):
        return "GPU profile marker chunks are out of order"
    missing = [i for i in range(1, total + 1) if i not in indices]
    if missing:
        return f"GPU profile marker chunk {missing[0]} of {total} is missing"
    return None


def _assemble(run: list[str]) -> Result:
    """The payload of a run of marker lines that ends the log."""
    parts: list[tuple[int, int, str]] = []
    for line in run:
        match = _LINE.match(line)
        if match is None:
            return None, "malformed GPU profile marker line"
        parts.append((int(match.group(1)), int(match.group(2)), match.group(3)))
    totals = {total for _, total, _ in parts}
    if len(totals) != 1:
        return None, "GPU profile marker lines of different profiles at the end of the log"
    total = totals.pop()
    if total < 1 or total > MAX_CHUNKS:
        return None, f"GPU profile marker says {total} chunks; a profile within the cap has 1 to {MAX_CHUNKS}"
    why = _order([i for i, _, _ in parts], total)
    if why:
        return None, why
    if any(len(text) > CHUNK_CHARS for _, _, text in parts):
        return None, f"a GPU profile marker chunk is longer than {CHUNK_CHARS} characters"
    text = "".join(text for _, _, text in parts)
    if len(text.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        return None, f"the GPU profile is larger than the {MAX_PAYLOAD_BYTES}-byte cap"

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        payload = json.loads(text, parse_constant=constant)
    except ValueError as error:
        return None, f"the GPU profile is not valid JSON ({error})"
    if not isinstance(payload, dict):
        return None, "the GPU profile is not a JSON object"
    if payload.get("v") != VERSION:
        return None, f"the GPU profile has version {payload.get('v')!r}; this reader knows version {VERSION}"
    return payload, None


def read_profile(lines: Iterable[str]) -> Result:
    """``(payload, None)`` for a complete marker run ending the log, else ``(None, why)``.

    Streams: a log of any length is read once, and at most ``MAX_CHUNKS + 1`` marker lines are
    kept. Trailing whitespace is ignored (no chunk ends in whitespace), so CRLF logs and pipelines
    that strip lines read the same.
    """
    run: list[str] = []
    count = 0  # marker lines in the current run (``run`` keeps at most MAX_CHUNKS + 1 of them)
    earlier = broken = oversized = gap = False  # gap: blank lines after the current run
    for raw in lines:
        line = raw.rstrip()
        if not line:
            gap = gap or count > 0
            continue
        if not line.startswith(PROFILE_MARKER):
            earlier = earlier or count > 0
            run, count, broken, oversized, gap = [], 0, False, False, False
            continue
        broken, gap, count = broken or gap, False, count + 1
        if len(line) > len(PROFILE_MARKER) + 16 + CHUNK_CHARS:
            oversized = True
        elif len(run) <= MAX_CHUNKS:
            run.append(line)
    if earlier:
        return None, "a GPU profile marker appears in the middle of the log, not only at its end"
    if not count:
        return None, "no GPU profile marker in the log"
    if oversized:
        return None, f"a GPU profile marker line is longer than {CHUNK_CHARS} characters of payload"
    if count > MAX_CHUNKS:
        return None, f"the GPU profile markers at the end of the log exceed the {MAX_PAYLOAD_BYTES}-byte cap"
    if broken:
        return None, "the GPU profile markers at the end of the log are not contiguous"
    return _assemble(run)

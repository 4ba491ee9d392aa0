"""Line charts as inline SVG, drawn on the server: no JavaScript, no CDN, nothing fetched by the page.

Every text that reaches the SVG (titles, legends) is escaped here, so a GPU name or a task id
holding markup stays text. Each series is one ``<path>`` element (a gap in the data is a move,
not a line across it), and a series is cut to at most ``MAX_POINTS`` points by averaging
consecutive points in equal buckets (memory keeps each bucket's peak, like the sampler's own
downsampling), so a chart's size is bounded whatever the document holds: 8 GPUs at 500 points
are about 50 KB of SVG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

#: The most points one series draws; the entrypoint's own bound is lower, this guards against any document.
MAX_POINTS = 500
#: Candidate tick steps on the time axis, seconds.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_WIDTH, _HEIGHT = 720, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 30, 10, 24  # room for the last time label


@dataclass(frozen=True)
class Series:
    """One line: ``label`` (shown in the legend, escaped), ``times`` in epoch seconds, ``values`` (None: no reading)."""

    label: str
    times: Sequence[float]
    values: Sequence[float | None]


def decimate(
    times: Sequence[float], values: Sequence[float | None], bound: int | None, *, peak: bool = False
) -> tuple[list[float], list[float | None]]:
    """At most ``bound`` points (None: all): each bucket of consecutive points becomes its mean (or peak)."""
    count = min(len(times), len(values))
    if bound is None or count <= bound:
        return list(times[:count]), list(values[:count])
    size = math.ceil(count / bound)
    out_t: list[float] = []
    out_v: list[float | None] = []
    for start in range(0, count, size):
        stop = min(start + size, count)
        present = [v for v in values[start:stop] if v is not None]
        out_t.append(sum(times[start:stop]) / (stop - start))
        out_v.append((max(present) if peak else sum(present) / len(present)) if present else None)
    return out_t, out_v


def y_axis(highest: float) -> tuple[float, float]:
    """``(top, step)`` of a value axis reaching ``highest``: a 1, 2, 2.5 or 5 times ten to a power step, 5 at most.

    Nothing to show (0, negative, below a millionth, whose fifth underflows ``log10``) or no number
    (NaN, inf) gives the 0 to 1 axis.
    """
    if not highest >= 1e-6 or not math.isfinite(highest):
        return 1.0, 0.25
    power = 10.0 ** math.floor(math.log10(highest / 5))
    step = next(s * power for s in (1, 2, 2.5, 5, 10) if math.ceil(highest / (s * power) - 1e-9) <= 5)
    return math.ceil(highest / step - 1e-9) * step, step


def elapsed(seconds: float, span: float) -> str:
    """``1:05:00`` style for spans of an hour or more, ``5:00`` below."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if span >= 3600 else f"{hours * 60 + minutes}:{secs:02d}"


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _path(xs: Sequence[float], ys: Sequence[float | None]) -> str:
    parts: list[str] = []
    pen_down = False
    for x, y in zip(xs, ys, strict=False):
        if y is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f} {y:.1f}")
        pen_down = True
    return "".join(parts)


def line_chart(
    title: str,
    unit: str,
    series: Sequence[Series],
    *,
    start: float | None = None,
    end: float | None = None,
    y_at_least: float = 0.0,
    bound: int | None = MAX_POINTS,
    peak: bool = False,
) -> str:
    """A ``<figure>`` with one SVG line per series over elapsed time, a y axis in ``unit`` and a legend.

    ``start``/``end`` fix the time axis (the run's start and end), else the data's span; the value
    axis starts at 0 and reaches a round number above the highest value and ``y_at_least`` (100
    for a percentage, the memory size for memory used).
    ``bound`` None draws every point (the naive baseline the bench compares with).
    """
    cut = [decimate(s.times, s.values, bound, peak=peak) for s in series]
    all_t = [t for times, _ in cut for t in times]
    all_v = [v for _, values in cut for v in values if v is not None]
    t0 = start if start is not None else (min(all_t) if all_t else 0.0)
    t1 = end if end is not None else (max(all_t) if all_t else 1.0)
    span = max(t1 - t0, 1e-9)
    top, y_step = y_axis(max([*all_v, y_at_least]))
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def x_of(t: float) -> float:
        return _LEFT + (t - t0) / span * plot_w

    def y_of(v: float) -> float:
        return _TOP + plot_h - min(max(v, 0.0), top) / top * plot_h

    label = escape(f"{title} ({unit})")
    out = [
        f'<figure class="chart"><figcaption>{label}</figcaption>',
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{label}">',
        f"<title>{label}</title>",
        '<g class="axis">',
    ]
    for i in range(round(top / y_step) + 1):
        value = i * y_step
        y = y_of(value)
        out.append(f'<line x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_number(value)}</text>')
    step = next((s for s in _TIME_STEPS if span / s <= 6), _TIME_STEPS[-1] * math.ceil(span / _TIME_STEPS[-1] / 6))
    tick = 0.0
    while tick <= span + 1e-9:
        x = x_of(t0 + tick)
        out.append(f'<text x="{x:.1f}" y="{_HEIGHT - 6}" text-anchor="middle">{elapsed(tick, span)}</text>')
        tick += step
    out.append("</g>")
    for index, ((times, values), line) in enumerate(zip(cut, series, strict=False)):
        d = _path([x_of(t) for t in times], [None if v is None else y_of(v) for v in values])
        if d:
            out.append(f'<path class="s{index % 8}" d="{d}"><title>{escape(line.label)}</title></path>')
    out.append("</svg>")
    out.append(legend([s.label for s in series]))
    out.append("</figure>")
    return "".join(out)


def legend(labels: Sequence[str]) -> str:
    """The colour key under a chart, in HTML (escaped)."""
    items = "".join(
        f'<li><span class="swatch s{index % 8}"></span>{escape(text)}</li>' for index, text in enumerate(labels)
    )
    return f'<ul class="legend">{items}</ul>'


#: The most slices a sparkline draws (one table cell is 120 pixels wide).
SPARK_BUCKETS = 48
#: A sparkline's slices: ``(slice index, mean reading or None for a gap)`` for each slice a sample fell in.
SparkPoints = list[tuple[int, float | None]]


def spark_buckets(
    times: Sequence[float], values: Sequence[float | None], *, buckets: int = SPARK_BUCKETS
) -> tuple[int, SparkPoints]:
    """How many slices a sparkline of these samples has, and the mean reading of each slice a sample fell in.

    Points are averaged in equal slices of time, ``buckets`` at most and no more than there are
    distinct sample times, so several GPUs' series given together come out as their mean. A slice
    whose samples have no reading is a gap (None); a slice that no sample falls in (the sampling is
    coarser than the slices, or uneven) is left out and the line joins its neighbours, so a short
    run draws a connected line rather than isolated points. This is what the ``gpu_profile_summary``
    XCom stores (``document.profile_summary``): the run page draws it without reading any series.
    """
    read = [t for t, v in zip(times, values, strict=False) if v is not None]
    if not read:
        return 0, []
    t0, t1 = min(read), max(read)
    # Samples without a reading before the first reading or after the last: nothing to draw there.
    pairs = [(t, v) for t, v in zip(times, values, strict=False) if t0 <= t <= t1]
    span = max(t1 - t0, 1e-9)
    buckets = max(1, min(buckets, len({t for t, _ in pairs})))
    sums = [[0.0, 0] for _ in range(buckets)]
    sampled = [False] * buckets
    for t, v in pairs:
        index = min(int((t - t0) / span * buckets), buckets - 1)
        sampled[index] = True
        if v is not None:
            sums[index][0] += v
            sums[index][1] += 1
    return buckets, [
        (i, None if n == 0 else total / n)
        for i, ((total, n), seen) in enumerate(zip(sums, sampled, strict=True))
        if seen
    ]


def spark_svg(buckets: int, points: SparkPoints, *, y_max: float = 100.0) -> str:
    """A small chart without axes (120 x 24) for a table cell, from ``spark_buckets``; nothing without a reading."""
    if buckets < 1 or all(v is None for _, v in points):
        return ""
    xs = [1 + (i + 0.5) / buckets * 118 for i, _ in points]
    ys = [None if v is None else 23 - min(max(v, 0.0), y_max) / y_max * 22 for _, v in points]
    return (
        '<svg class="spark" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 24" width="120" height="24" '
        f'aria-hidden="true"><path class="s0" d="{_path(xs, ys)}"/></svg>'
    )


def sparkline(
    times: Sequence[float], values: Sequence[float | None], *, y_max: float = 100.0, buckets: int = SPARK_BUCKETS
) -> str:
    """A small chart without axes (120 x 24) for a table cell: a task's utilisation over time (``spark_buckets``)."""
    return spark_svg(*spark_buckets(times, values, buckets=buckets), y_max=y_max)

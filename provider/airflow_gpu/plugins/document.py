"""Reading ``gpu_profile`` documents as the pages need them, their summaries, and a DAG run's roll-up.

A task instance's page reads its own ``gpu_profile`` document. The run page reads, per task
instance, the small ``gpu_profile_summary`` XCom (``profile_summary``: the row's figures, the price
source and the utilisation sparkline's slices, under 1 KB) that the operator pushes beside the
document, never the documents' series: a run of 1,000 mapped instances holds 5-50 MB of those.
A document written by a provider older than the summary has none; the reader then summarises the
document itself (``RunEntry.from_document``) and the page says so.

XCom is written by tasks, so a document is untrusted input: any task may push a ``gpu_profile``
of any shape, and an older or newer provider may have written it. ``clean`` makes what was read
JSON-safe first (the JSON twins are encoded with ``allow_nan=False``; a huge integer overflows
float arithmetic and has no ``str`` past 4,300 digits), and every accessor here answers None (or
an empty list) for a missing or mistyped field instead of raising, so that a bad document renders
as a page with dashes, never as an error. Pure: no Airflow, no FastAPI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_gpu.plugins import charts

#: The XCom keys the report reads (``gpu_interruptions`` is written by both GPU operators).
PROFILE_KEY = "gpu_profile"
INTERRUPTIONS_KEY = "gpu_interruptions"
#: The run page's per-instance summary, pushed by the operator beside ``gpu_profile`` (``profile_summary``).
SUMMARY_KEY = "gpu_profile_summary"
#: Why a row has no figures.
NO_PROFILE_NOTE = "no gpu_profile in XCom"
NOT_A_PROFILE_NOTE = "gpu_profile is not a profile document"
NOT_A_SUMMARY_NOTE = "gpu_profile_summary is not a summary (version 1)"
#: The measured series of a document's ``series`` entries, in the order the page draws them.
SERIES_FIELDS = ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock")
#: The largest magnitude a number in a document may have: above any figure a profile holds (epoch
#: milliseconds are 2e12, a petabyte in bytes 1e15), low enough that no sum, product or axis the
#: pages compute from such numbers can overflow. Larger numbers, NaN and infinities read as absent.
LARGEST = 1e15
#: How deep ``sanitise`` follows nested lists and objects (a document is 4 deep); deeper is absent.
MAX_DEPTH = 32


def number(value: Any) -> float | None:
    """An int or float within ``LARGEST`` as float; anything else (bool, str, NaN, inf, 10**400, None) as None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # The comparison is exact for an int of any size (no float conversion to overflow) and false for NaN.
    return float(value) if -LARGEST <= value <= LARGEST else None


def sanitise(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy of an XCom value: what ``json.dumps(allow_nan=False)`` encodes and the pages can do sums on.

    Numbers outside ``LARGEST`` (NaN and infinities included) become None, tuples lists, objects
    keep their string keys only; anything that is not JSON (a datetime, a set, an object that
    Airflow's serde decoded) and anything nested deeper than ``MAX_DEPTH`` becomes None.
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int | float):
        return value if -LARGEST <= value <= LARGEST else None
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        return {key: sanitise(item, depth + 1) for key, item in value.items() if isinstance(key, str)}
    if isinstance(value, list | tuple):
        return [sanitise(item, depth + 1) for item in value]
    return None


def text(value: Any) -> str | None:
    """A string, or a number shown as one; anything else as None."""
    if isinstance(value, str):
        return value
    return None if number(value) is None else str(value)


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def is_profile(value: Any) -> bool:
    """Whether an XCom value is a version-1 ``gpu_profile`` document (anything else shows as "not a profile")."""
    return isinstance(value, Mapping) and value.get("v") == 1


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's downsampled series, cleaned: times and each field's values, aligned."""

    gpu: int
    times: list[float]
    values: dict[str, list[float | None]]


def _numbers(raw: list[Any]) -> list[float | None]:
    """``number`` over a whole list, inlined (a day at 1 Hz is 86,400 points): NaN fails the comparison."""
    return [v if (type(v) is float or type(v) is int) and -LARGEST <= v <= LARGEST else None for v in raw]


def series(document: Mapping[str, Any], fields: Sequence[str] = SERIES_FIELDS) -> list[GpuSeries]:
    """The document's per-GPU series (only ``fields``); points without a valid time are dropped, bad values are gaps."""
    result = []
    for entry in items(document.get("series")):
        entry = mapping(entry)
        gpu = number(entry.get("gpu"))
        times = _numbers(items(entry.get("time")))
        keep = [i for i, t in enumerate(times) if t is not None]
        if gpu is None or not keep:
            continue
        values: dict[str, list[float | None]] = {}
        for name in fields:
            column = _numbers(items(entry.get(name))[: len(times)])
            column += [None] * (len(times) - len(column))
            values[name] = column if len(keep) == len(times) else [column[i] for i in keep]
        valid = [t for t in times if t is not None]
        result.append(GpuSeries(int(gpu), valid, values))
    return sorted(result, key=lambda s: s.gpu)


def gpu_labels(document: Mapping[str, Any]) -> dict[int, str]:
    """``GPU 0 · NVIDIA A10G`` per GPU index, from ``gpus`` (else the summary's names)."""
    labels: dict[int, str] = {}
    for entry in items(document.get("gpus")) + items(document.get("summary")):
        entry = mapping(entry)
        index = number(entry.get("index", entry.get("gpu")))
        if index is not None and int(index) not in labels:
            name = text(entry.get("name"))
            labels[int(index)] = f"GPU {int(index)}" + (f" · {name}" if name else "")
    return labels


def interruption_count(document: Mapping[str, Any] | None, records: Any) -> int:
    """The operator's ``gpu_interruptions`` records when there are some, else the document's count."""
    if isinstance(records, list):
        return len(records)
    count = number(mapping(document).get("interruptions"))
    return int(count) if count is not None and count > 0 else 0


@dataclass(frozen=True)
class TaskEntry:
    """What XCom holds for one task instance of a run: its profile (any value) and interruption records."""

    task_id: str
    map_index: int
    profile: Any = None
    interruptions: Any = None


@dataclass(frozen=True)
class RunEntry:
    """What the run page reads for one task instance: its summary (any value) and interruption records.

    ``summary`` is None where the instance has no ``gpu_profile``; ``from_document`` says it was
    worked out from the full document on this read (a document written before summaries existed).
    """

    task_id: str
    map_index: int
    summary: Any = None
    interruptions: Any = None
    from_document: bool = False


def clean(entry: TaskEntry) -> TaskEntry:
    """The entry with its XCom values ``sanitise``d: what the app does with every entry it reads."""
    return TaskEntry(entry.task_id, entry.map_index, sanitise(entry.profile), sanitise(entry.interruptions))


def clean_run(entry: RunEntry) -> RunEntry:
    """``clean`` for the run page's entries: a summary is XCom too, which any task may push."""
    return RunEntry(
        entry.task_id, entry.map_index, sanitise(entry.summary), sanitise(entry.interruptions), entry.from_document
    )


def profile_summary(profile: Any) -> dict[str, Any]:
    """The ``gpu_profile_summary`` of a ``gpu_profile`` value: what the run page shows of it, in under 1 KB.

    The operator pushes it beside the document; the reader calls it on an older document that has
    none. ``profile`` is any value (``sanitise``d first where it came from XCom): a value that is not
    a version-1 document gives ``profiled: false`` and a note. ``spark`` holds the sparkline's
    slices (``charts.spark_buckets`` over every GPU's utilisation), not the series: ``util`` the
    mean of each slice a sample fell in, in whole percent (a pixel is 4.5 %), null for a gap, and
    ``at`` their slice numbers where some slice had no sample (absent: slices 0, 1, 2, ...).
    """
    if not is_profile(profile):
        return {"v": 1, "profiled": False, "note": NOT_A_PROFILE_NOTE}
    doc = mapping(profile)
    cost = mapping(doc.get("cost"))
    lines = series(doc, ("gpu_util",))
    buckets, points = charts.spark_buckets(
        [t for s in lines for t in s.times], [v for s in lines for v in s.values["gpu_util"]]
    )
    return {
        "v": 1,
        "profiled": True,
        "empty": bool(doc.get("empty")),
        "note": text(doc.get("note")),
        "backend": text(doc.get("backend")),
        "accelerator": text(doc.get("accelerator")),
        "capacity": text(doc.get("capacity")),
        "instance_type": text(doc.get("instance_type")),
        "duration_s": number(doc.get("duration_s")),
        "gpu_hours": number(doc.get("gpu_hours")),
        "energy_wh": number(doc.get("energy_wh")),
        "util_mean": number(doc.get("util_mean")),
        "cost": {
            "usd": number(cost.get("usd")),
            "prices_date": text(cost.get("prices_date")),
            "source": text(cost.get("source")),
        }
        if cost
        else None,
        "interruptions": interruption_count(doc, None),
        "advice": len(items(doc.get("advice"))),
        "spark": _spark_json(buckets, points),
    }


def _spark_json(buckets: int, points: charts.SparkPoints) -> dict[str, Any]:
    spark: dict[str, Any] = {"buckets": buckets, "util": [None if v is None else round(v) for _, v in points]}
    if [i for i, _ in points] != list(range(len(points))):
        spark["at"] = [i for i, _ in points]
    return spark


def spark(summary: Any) -> tuple[int, charts.SparkPoints]:
    """A summary's sparkline slices, as ``charts.spark_svg`` takes them; malformed slices are left out."""
    raw = mapping(mapping(summary).get("spark"))
    count = number(raw.get("buckets"))
    if count is None or not 1 <= count <= charts.SPARK_BUCKETS:
        return 0, []
    buckets = int(count)
    util = items(raw.get("util"))
    at = items(raw.get("at")) if "at" in raw else list(range(len(util)))
    points: charts.SparkPoints = []
    for slot, value in zip(at, util, strict=False):
        index = number(slot)
        if index is not None and index == int(index) and 0 <= index < buckets:
            points.append((int(index), number(value)))
    return buckets, points


def task_row(entry: RunEntry) -> dict[str, Any]:
    """One task instance's line of the run roll-up (the JSON twin's ``tasks`` items), from its summary."""
    summary = mapping(entry.summary) if is_profile(entry.summary) else {}
    profiled = summary.get("profiled") is True
    s = summary if profiled else {}
    cost = mapping(s.get("cost"))
    if entry.summary is None:
        missing: str | None = NO_PROFILE_NOTE
    elif not summary:
        missing = NOT_A_SUMMARY_NOTE
    else:
        missing = text(summary.get("note")) or NOT_A_PROFILE_NOTE
    advice = number(s.get("advice"))
    return {
        "task_id": entry.task_id,
        "map_index": entry.map_index,
        "profiled": profiled,
        "empty": bool(s.get("empty")) if profiled else None,
        "note": text(s.get("note")) if profiled else missing,
        "backend": text(s.get("backend")),
        "accelerator": text(s.get("accelerator")),
        "capacity": text(s.get("capacity")),
        "instance_type": text(s.get("instance_type")),
        "duration_s": number(s.get("duration_s")),
        "gpu_hours": number(s.get("gpu_hours")),
        "energy_wh": number(s.get("energy_wh")),
        "util_mean": number(s.get("util_mean")),
        "cost_usd": number(cost.get("usd")),
        "interruptions": interruption_count(s, entry.interruptions),
        "advice": int(advice) if advice is not None and advice > 0 else 0,
    }


def _total(rows: Sequence[Mapping[str, Any]], field: str) -> tuple[float | None, int]:
    """The sum of ``field`` over the rows that have it, and how many rows that was."""
    present = [row[field] for row in rows if row[field] is not None]
    return (sum(present) if present else None), len(present)


def rollup(dag_id: str, run_id: str, entries: Sequence[RunEntry]) -> dict[str, Any]:
    """A DAG run's totals over every task instance with a profile or interruption records, from their summaries.

    Mean utilisation is weighted by GPU-hours (a GPU busy for an hour counts more than one busy for
    a minute); energy and cost add up what the documents have and say how many had it.
    ``summarised_from_documents`` counts the instances whose full document had to be read (no summary).
    """
    ordered = sorted(entries, key=lambda e: (e.task_id, e.map_index))
    rows = [task_row(e) for e in ordered]
    gpu_hours, _ = _total(rows, "gpu_hours")
    energy, energy_n = _total(rows, "energy_wh")
    cost, cost_n = _total(rows, "cost_usd")
    weighted = [(r["util_mean"], r["gpu_hours"]) for r in rows if r["util_mean"] is not None and r["gpu_hours"]]
    hours = sum(h for _, h in weighted)
    prices: set[tuple[str | None, str | None]] = set()
    for entry, row in zip(ordered, rows, strict=True):
        if row["profiled"] and (cost_doc := mapping(mapping(entry.summary).get("cost"))):
            prices.add((text(cost_doc.get("prices_date")), text(cost_doc.get("source"))))
    profiled = [r for r in rows if r["profiled"]]
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "totals": {
            "task_instances": len(profiled),
            "gpu_hours": gpu_hours,
            "energy_wh": energy,
            "energy_task_instances": energy_n,
            "cost_usd": cost,
            "cost_task_instances": cost_n,
            "util_mean": sum(u * h for u, h in weighted) / hours if hours else None,
            "interruptions": sum(r["interruptions"] for r in rows),
        },
        "summarised_from_documents": sum(1 for e in ordered if e.from_document),
        "prices": [{"prices_date": d, "source": s} for d, s in sorted(prices, key=lambda p: (p[0] or "", p[1] or ""))],
        "tasks": rows,
    }

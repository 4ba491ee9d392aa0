"""Reading ``gpu_profile`` documents as the pages need them, and a DAG run's roll-up of them.

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

#: The XCom keys the report reads (``gpu_interruptions`` is written by both GPU operators).
PROFILE_KEY = "gpu_profile"
INTERRUPTIONS_KEY = "gpu_interruptions"
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


def clean(entry: TaskEntry) -> TaskEntry:
    """The entry with its XCom values ``sanitise``d: what the app does with every entry it reads."""
    return TaskEntry(entry.task_id, entry.map_index, sanitise(entry.profile), sanitise(entry.interruptions))


def task_row(entry: TaskEntry) -> dict[str, Any]:
    """One task instance's line of the run roll-up (the JSON twin's ``tasks`` items)."""
    doc = mapping(entry.profile) if is_profile(entry.profile) else {}
    cost = mapping(doc.get("cost"))
    missing = "no gpu_profile in XCom" if entry.profile is None else "gpu_profile is not a profile document"
    return {
        "task_id": entry.task_id,
        "map_index": entry.map_index,
        "profiled": bool(doc),
        "empty": bool(doc.get("empty")) if doc else None,
        "note": text(doc.get("note")) if doc else missing,
        "backend": text(doc.get("backend")),
        "accelerator": text(doc.get("accelerator")),
        "capacity": text(doc.get("capacity")),
        "instance_type": text(doc.get("instance_type")),
        "duration_s": number(doc.get("duration_s")),
        "gpu_hours": number(doc.get("gpu_hours")),
        "energy_wh": number(doc.get("energy_wh")),
        "util_mean": number(doc.get("util_mean")),
        "cost_usd": number(cost.get("usd")),
        "interruptions": interruption_count(doc, entry.interruptions),
        "advice": len(items(doc.get("advice"))),
    }


def _total(rows: Sequence[Mapping[str, Any]], field: str) -> tuple[float | None, int]:
    """The sum of ``field`` over the rows that have it, and how many rows that was."""
    present = [row[field] for row in rows if row[field] is not None]
    return (sum(present) if present else None), len(present)


def rollup(dag_id: str, run_id: str, entries: Sequence[TaskEntry]) -> dict[str, Any]:
    """A DAG run's totals over every task instance with a profile or interruption records.

    Mean utilisation is weighted by GPU-hours (a GPU busy for an hour counts more than one busy for
    a minute); energy and cost add up what the documents have and say how many had it.
    """
    rows = [task_row(e) for e in sorted(entries, key=lambda e: (e.task_id, e.map_index))]
    gpu_hours, _ = _total(rows, "gpu_hours")
    energy, energy_n = _total(rows, "energy_wh")
    cost, cost_n = _total(rows, "cost_usd")
    weighted = [(r["util_mean"], r["gpu_hours"]) for r in rows if r["util_mean"] is not None and r["gpu_hours"]]
    hours = sum(h for _, h in weighted)
    prices: set[tuple[str | None, str | None]] = set()
    for entry in entries:
        if cost_doc := mapping(mapping(entry.profile).get("cost")) if is_profile(entry.profile) else {}:
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
        "prices": [{"prices_date": d, "source": s} for d, s in sorted(prices, key=lambda p: (p[0] or "", p[1] or ""))],
        "tasks": rows,
    }

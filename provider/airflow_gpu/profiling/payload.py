"""The container's profile payload as the worker may trust it: the contract's types, finite numbers.

The payload comes from the workload's log. The marker reader checks only that it is JSON with
``"v": 1``; the workload writes to the same log, and Python's ``json`` reads ``1e999`` as inf and
``NaN`` as nan. So before anything adds it up, ``clean`` keeps every field that has the shape the
payload contract (version 1) gives it, sets to null (or, for a list entry without its identity,
drops) what does not, and names each thing it left out. Whatever JSON-shaped value it is handed,
it returns, and what it returns holds no number that JSON cannot carry (the report's JSON twin
answers 500 on inf) nor one whose sums and ratios could overflow to inf.

Fields beyond the contract are kept (a newer entrypoint may add some), cleaned the same way.
Pure: standard library and the marker's column names only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu.profiling.marker import SERIES_FIELDS

#: Any number of larger magnitude is malformed. No figure of a GPU profile comes near it (epoch
#: seconds are 1.8e9, a GPU's memory 2e5 MiB, a year of energy 1e7 Wh), and bounding every number
#: keeps each sum, product and mean the document derives from them finite.
MAX_MAGNITUDE = 1e15
#: Nesting deeper than this (in fields beyond the contract) is cut: the contract nests four deep,
#: and a recursive walk must not meet Python's recursion limit on a hostile payload.
MAX_DEPTH = 32
#: GPU indices at or above this are malformed (NVML numbers a node's GPUs from 0; nodes hold 16).
MAX_GPU_INDEX = 1 << 16

#: Summary fields and the range a reading must lie in (utilisation is a percentage, the idle
#: fraction a fraction; memory, power and energy cannot be negative).
_SUMMARY_NUMBERS: dict[str, tuple[float, float]] = {
    "util_mean": (0.0, 100.0),
    "util_p95": (0.0, 100.0),
    "fb_peak": (0.0, MAX_MAGNITUDE),
    "fb_total": (0.0, MAX_MAGNITUDE),
    "power_mean": (0.0, MAX_MAGNITUDE),
    "power_peak": (0.0, MAX_MAGNITUDE),
    "energy_wh": (0.0, MAX_MAGNITUDE),
    "idle_fraction": (0.0, 1.0),
}
_SERIES_COLUMNS = ("time", *SERIES_FIELDS)


@dataclass
class Cleaned:
    """The cleaned payload, the problems found (``"path: what"``) and how many summary entries were dropped."""

    payload: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    dropped_summaries: int = 0


def finite_number(value: Any) -> float | None:
    """A finite int or float as float, else None (a bool, text, or a huge int that has no float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _bound(value: float) -> str:
    """A range bound as a person reads it: 100, 4294967295, 1e+15."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e12 else f"{value:g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(value: Any, low: float, high: float) -> bool:
    """A number within [low, high]; NaN, inf and ints beyond them compare False (ints exactly)."""
    return _is_number(value) and low <= value <= high


class _Cleaner:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def note(self, path: str, what: str) -> None:
        self.problems.append(f"{path}: {what}")

    def number(self, entry: Mapping[str, Any], key: str, path: str, low: float, high: float) -> Any:
        value = entry.get(key)
        if value is None or _in_range(value, low, high):
            return value
        self.note(path, f"not a number in [{_bound(low)}, {_bound(high)}]" if _is_number(value) else "not a number")
        return None

    def integer(self, entry: Mapping[str, Any], key: str, path: str, low: int, high: float) -> Any:
        value = entry.get(key)
        if value is None or (isinstance(value, int) and _in_range(value, low, high)):
            return value
        self.note(path, f"not an integer in [{_bound(low)}, {_bound(high)}]")
        return None

    def text(self, entry: Mapping[str, Any], key: str, path: str) -> str | None:
        value = entry.get(key)
        if value is None or isinstance(value, str):
            return value
        self.note(path, "not a string")
        return None

    def flag(self, entry: Mapping[str, Any], key: str, path: str) -> bool | None:
        value = entry.get(key)
        if value is None or isinstance(value, bool):
            return value
        self.note(path, "not true, false or null")
        return None

    def json(self, value: Any, path: str, depth: int = 0) -> Any:
        """Any value as JSON can carry it: non-finite or huge numbers and non-JSON values as None."""
        if value is None or isinstance(value, str | bool):
            return value
        if _is_number(value):
            if _in_range(value, -MAX_MAGNITUDE, MAX_MAGNITUDE):
                return value
            self.note(path, "not a finite number of sane size")
            return None
        if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple):
            self.note(path, f"nested deeper than {MAX_DEPTH}")
            return None
        if isinstance(value, Mapping):
            out = {}
            for key, item in value.items():
                if isinstance(key, str):
                    out[key] = self.json(item, f"{path}.{key}", depth + 1)
                else:
                    self.note(path, f"key {key!r} is not a string")
            return out
        if isinstance(value, list | tuple):
            return [self.json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
        self.note(path, f"not JSON ({type(value).__name__})")
        return None

    def rest(self, entry: Mapping[str, Any], known: set[str], path: str, depth: int = 3) -> dict[str, Any]:
        """The entry's fields beyond ``known`` (their values ``depth`` deep in the payload), cleaned."""
        return {
            k: self.json(v, f"{path}.{k}", depth) for k, v in entry.items() if isinstance(k, str) and k not in known
        }

    def entries(self, payload: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
        """The list field ``key``'s entries that are objects, with their paths; the rest noted."""
        value = payload.get(key)
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            self.note(key, "not a list")
            return []
        found = []
        for i, entry in enumerate(value):
            if isinstance(entry, Mapping):
                found.append((f"{key}[{i}]", entry))
            else:
                self.note(f"{key}[{i}]", "dropped: not an object")
        return found

    def gpu(self, path: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        known = {"index", "uuid", "name", "fb_total", "mig", "pci"}
        return {
            **self.rest(entry, known, path),
            "index": self.integer(entry, "index", f"{path}.index", 0, MAX_GPU_INDEX - 1),
            "uuid": self.text(entry, "uuid", f"{path}.uuid"),
            "name": self.text(entry, "name", f"{path}.name"),
            "fb_total": self.number(entry, "fb_total", f"{path}.fb_total", 0.0, MAX_MAGNITUDE),
            "mig": self.flag(entry, "mig", f"{path}.mig"),
            "pci": self.text(entry, "pci", f"{path}.pci"),
        }

    def summary(self, path: str, entry: Mapping[str, Any]) -> dict[str, Any] | None:
        """A summary entry, or None (dropped) without a GPU index, a sample count or a duration."""
        gpu, samples, seconds = entry.get("gpu"), entry.get("samples"), entry.get("seconds")
        if not (isinstance(gpu, int) and _in_range(gpu, 0, MAX_GPU_INDEX - 1)):
            self.note(path, "dropped: gpu is not a GPU index")
            return None
        if not (isinstance(samples, int) and _in_range(samples, 0, MAX_MAGNITUDE)):
            self.note(path, "dropped: samples is not a count")
            return None
        if not _in_range(seconds, 0.0, MAX_MAGNITUDE):
            self.note(path, "dropped: seconds is not a duration (a finite number, not negative)")
            return None
        known = {"gpu", "samples", "seconds", "uuid", "name", "energy_source", "energy_scope", *_SUMMARY_NUMBERS}
        cleaned = {
            **self.rest(entry, known, path),
            "gpu": gpu,
            "uuid": self.text(entry, "uuid", f"{path}.uuid"),
            "name": self.text(entry, "name", f"{path}.name"),
            "samples": samples,
            "seconds": seconds,
        }
        for name, (low, high) in _SUMMARY_NUMBERS.items():
            cleaned[name] = self.number(entry, name, f"{path}.{name}", low, high)
        cleaned["energy_source"] = self.text(entry, "energy_source", f"{path}.energy_source")
        if "energy_scope" in entry:  # "gpu": power and energy are the whole GPU's, the task held a MIG slice
            cleaned["energy_scope"] = self.text(entry, "energy_scope", f"{path}.energy_scope")
        return cleaned

    def series(self, path: str, entry: Mapping[str, Any]) -> dict[str, Any] | None:
        gpu = entry.get("gpu")
        if not (isinstance(gpu, int) and _in_range(gpu, 0, MAX_GPU_INDEX - 1)):
            self.note(path, "dropped: gpu is not a GPU index")
            return None
        cleaned: dict[str, Any] = {**self.rest(entry, {"gpu", *_SERIES_COLUMNS}, path), "gpu": gpu}
        for name in _SERIES_COLUMNS:
            if name not in entry:
                continue
            column = entry[name]
            if not isinstance(column, list | tuple):
                self.note(f"{path}.{name}", "dropped: not a list")
                continue
            values = [v if v is None or _in_range(v, -MAX_MAGNITUDE, MAX_MAGNITUDE) else None for v in column]
            bad = sum(1 for v, raw in zip(values, column, strict=True) if v is None and raw is not None)
            if bad:
                self.note(f"{path}.{name}", f"{bad} value{'s' if bad > 1 else ''} not finite numbers, made gaps")
            cleaned[name] = values
        return cleaned

    def topology(self, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            gpus, matrix = value.get("gpus"), value.get("matrix")
            labels_ok = isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)
            rows_ok = isinstance(matrix, list) and all(
                isinstance(row, list) and all(isinstance(c, str) for c in row) for row in matrix
            )
            if labels_ok and rows_ok:
                return {**self.rest(value, {"gpus", "matrix"}, "topology", 2), "gpus": gpus, "matrix": matrix}
        self.note("topology", "dropped: not {gpus: [label], matrix: [[label]]}")
        return None

    def signals(self, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            self.note("signals", "not a list")
            return []
        names = [s for s in value if isinstance(s, str)]
        if len(names) < len(value):
            self.note("signals", f"{len(value) - len(names)} entries not signal names, dropped")
        return names


#: The contract's top-level fields; the rest of a payload is kept, cleaned.
CONTRACT_FIELDS = frozenset(
    {"v", "source", "note", "interval", "started", "ended", "exit_code", "signals", "spot_notice", "driver", "cuda",
     "gpus", "topology", "summary", "samples_taken", "series", "series_points"}
)  # fmt: skip


def clean(payload: Mapping[str, Any]) -> Cleaned:
    """``payload`` with every contract field of its contract type (or null), and what was left out.

    Fields the payload lacks stay absent (the caller fills them in); ``v`` is left to the caller.
    A summary or series entry without its GPU index (or, for a summary, its sample count and
    duration) is dropped whole: its figures would be added up as some other GPU's.
    """
    c = _Cleaner()
    out: dict[str, Any] = {
        key: c.json(value, key, 1)
        for key, value in payload.items()
        if isinstance(key, str) and key not in CONTRACT_FIELDS
    }
    for key in ("source", "note", "spot_notice", "driver", "cuda"):
        if key in payload:
            out[key] = c.text(payload, key, key)
    for key in ("started", "ended"):
        if key in payload:
            out[key] = c.number(payload, key, key, -MAX_MAGNITUDE, MAX_MAGNITUDE)
    if "interval" in payload:
        out["interval"] = c.number(payload, "interval", "interval", 0.0, MAX_MAGNITUDE)
    if "exit_code" in payload:
        out["exit_code"] = c.integer(payload, "exit_code", "exit_code", -(1 << 31), (1 << 32) - 1)
    for key in ("samples_taken", "series_points"):
        if key in payload:
            out[key] = c.integer(payload, key, key, 0, MAX_MAGNITUDE)
    if "signals" in payload:
        out["signals"] = c.signals(payload["signals"])
    if "topology" in payload:
        out["topology"] = c.topology(payload["topology"])
    if "gpus" in payload:
        out["gpus"] = [c.gpu(path, entry) for path, entry in c.entries(payload, "gpus")]
    dropped = 0
    if "summary" in payload:
        summaries: list[dict[str, Any]] = []
        seen: set[int] = set()
        for path, entry in c.entries(payload, "summary"):
            summary = c.summary(path, entry)
            if summary is not None and summary["gpu"] in seen:
                c.note(path, f"dropped: a second summary of GPU {summary['gpu']}")
                summary = None
            if summary is not None:
                seen.add(summary["gpu"])
                summaries.append(summary)
        given = payload["summary"]
        dropped = (len(given) if isinstance(given, list | tuple) else 0) - len(summaries)
        out["summary"] = summaries
    if "series" in payload:
        out["series"] = [s for path, entry in c.entries(payload, "series") if (s := c.series(path, entry)) is not None]
    return Cleaned(out, c.problems, dropped)


def finite(value: Any) -> tuple[Any, list[str]]:
    """``value`` with every number JSON cannot carry (or of insane size) as None, and where they were."""
    c = _Cleaner()
    return c.json(value, "document"), c.problems

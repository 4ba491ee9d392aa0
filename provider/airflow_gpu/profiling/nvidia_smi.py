"""``nvidia-smi --query-gpu`` lines as ``Sample`` values, for images without Python NVML.

``nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits -lms <ms>`` prints one line per
GPU per interval. A field the GPU does not support reads ``[N/A]`` or ``[Not Supported]``; such a
value is None. nvidia-smi has no energy-counter field, so ``total_energy_consumption`` is None and
the summary integrates power instead.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from airflow_gpu.profiling.samples import Sample

#: Query fields, in the order of ``Sample``'s (see ``nvidia-smi --help-query-gpu``).
QUERY = (
    "timestamp", "index", "uuid", "name", "utilization.gpu", "utilization.memory", "memory.used",
    "memory.total", "power.draw", "temperature.gpu", "clocks.sm",
)  # fmt: skip
MISSING = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")


def command(interval_ms: int) -> list[str]:
    """The nvidia-smi command line that prints one CSV line per GPU every ``interval_ms``."""
    return ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits", f"-lms={interval_ms}"]


def _number(value: str) -> float | None:
    value = value.strip()
    if value in MISSING:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _time(value: str) -> float:
    """nvidia-smi's ``timestamp`` (``2026/11/23 14:50:01.123``, the host's local time)."""
    parsed = datetime.strptime(value.strip(), "%Y/%m/%d %H:%M:%S.%f")
    return parsed.astimezone(timezone.utc).timestamp()


def parse(lines: Iterable[str]) -> Iterator[Sample]:
    """The samples in nvidia-smi's CSV lines; a line that is not one (a warning, a cut line) is skipped."""
    for row in csv.reader(line for line in lines if line.strip()):
        if len(row) != len(QUERY):
            continue
        try:
            time, index = _time(row[0]), int(row[1].strip())
        except ValueError:
            continue
        util, mem_util, used, total, power, temp, clock = (_number(v) for v in row[4:])
        yield Sample(
            time=time, gpu=index, uuid=row[2].strip(), name=row[3].strip(), gpu_util=util,
            mem_copy_util=mem_util, fb_used=used, fb_total=total, power_usage=power, gpu_temp=temp, sm_clock=clock,
        )  # fmt: skip

"""What a task's samples add up to, per GPU: the figures XCom ``gpu_profile`` carries.

Energy comes from the GPU's own counter where it has one (NVML's total energy consumption, in mJ
since the driver loaded: the difference between the first and last reading), else from power
integrated over time (trapezoids), which misses what happens between two samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import groupby
from typing import Any

from airflow_gpu.profiling.samples import Sample

#: Utilisation at or below this (percent) counts as idle.
IDLE_UTIL = 5.0


@dataclass(frozen=True)
class GpuSummary:
    gpu: int
    uuid: str
    name: str
    samples: int
    seconds: float
    util_mean: float | None
    util_p95: float | None
    fb_peak: float | None
    fb_total: float | None
    power_mean: float | None
    power_peak: float | None
    energy_wh: float | None
    energy_source: str | None  # "counter" or "integrated power"
    idle_fraction: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _present(samples: Sequence[Sample], name: str) -> list[float]:
    return [v for s in samples if (v := getattr(s, name)) is not None]


def _energy(series: Sequence[Sample]) -> tuple[float | None, str | None]:
    counter = [(s.time, s.total_energy_consumption) for s in series if s.total_energy_consumption is not None]
    if len(counter) >= 2 and counter[-1][1] >= counter[0][1]:
        return (counter[-1][1] - counter[0][1]) / 3_600_000, "counter"  # mJ -> Wh
    power = [(s.time, s.power_usage) for s in series if s.power_usage is not None]
    if len(power) >= 2:
        # Trapezoids between consecutive readings (indices, not itertools.pairwise: Python 3.8 runs this).
        joules = sum(
            (power[i][0] - power[i - 1][0]) * (power[i][1] + power[i - 1][1]) / 2 for i in range(1, len(power))
        )
        return joules / 3600, "integrated power"
    return None, None


def summarise_gpu(series: Sequence[Sample]) -> GpuSummary:
    """One GPU's samples (any order) as its summary."""
    series = sorted(series, key=lambda s: s.time)
    first = series[0]
    util, used, power = _present(series, "gpu_util"), _present(series, "fb_used"), _present(series, "power_usage")
    totals = _present(series, "fb_total")
    energy, source = _energy(series)
    return GpuSummary(
        gpu=first.gpu,
        uuid=first.uuid,
        name=first.name,
        samples=len(series),
        seconds=series[-1].time - first.time,
        util_mean=sum(util) / len(util) if util else None,
        util_p95=percentile(util, 0.95) if util else None,
        fb_peak=max(used) if used else None,
        fb_total=max(totals) if totals else None,
        power_mean=sum(power) / len(power) if power else None,
        power_peak=max(power) if power else None,
        energy_wh=energy,
        energy_source=source,
        idle_fraction=sum(1 for u in util if u <= IDLE_UTIL) / len(util) if util else None,
    )


def summarise(samples: Sequence[Sample]) -> list[GpuSummary]:
    """Per GPU (by index), in index order."""
    ordered = sorted(samples, key=lambda s: (s.gpu, s.time))
    return [summarise_gpu(list(group)) for _, group in groupby(ordered, key=lambda s: s.gpu)]


def gpu_hours(summaries: Sequence[GpuSummary]) -> float:
    """GPU-hours: each GPU's sampled span, added up."""
    return sum(s.seconds for s in summaries) / 3600

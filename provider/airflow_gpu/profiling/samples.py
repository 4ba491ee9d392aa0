"""One reading of one GPU, named as dcgm-exporter names its metrics, and the series' downsampling.

A cluster that already scrapes dcgm-exporter into Prometheus reads the same quantities under the
same names (``DCGM_FI_DEV_GPU_UTIL`` is ``gpu_util`` here, ``DCGM_FI_DEV_FB_USED`` is ``fb_used``,
...). A metric the GPU does not support (NVML answers ``NotSupported`` per call; utilisation on
a MIG device, power on some boards) is None, never an error and never a zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from itertools import groupby
from typing import Any

#: The sample's field and the dcgm-exporter metric it matches, where dcgm-exporter has one.
DCGM_NAMES: dict[str, str] = {
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "mem_copy_util": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "fb_used": "DCGM_FI_DEV_FB_USED",
    "power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "sm_clock": "DCGM_FI_DEV_SM_CLOCK",
}
#: The measured fields, averaged when samples are downsampled.
MEASURES = ("gpu_util", "mem_copy_util", "fb_used", "power_usage", "gpu_temp", "sm_clock")


@dataclass(frozen=True)
class Sample:
    """One GPU at one time (``time``: seconds since the epoch).

    ``gpu_util`` and ``mem_copy_util`` in %, ``fb_used`` and ``fb_total`` in MiB, ``power_usage``
    in W, ``total_energy_consumption`` in mJ since the driver loaded, ``gpu_temp`` in C,
    ``sm_clock`` in MHz.
    """

    time: float
    gpu: int
    uuid: str
    name: str
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    fb_used: float | None = None
    fb_total: float | None = None
    power_usage: float | None = None
    total_energy_consumption: float | None = None
    gpu_temp: float | None = None
    sm_clock: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def downsample(samples: Sequence[Sample], points: int) -> list[Sample]:
    """At most ``points`` samples per GPU: consecutive samples averaged in equal buckets.

    The energy counter keeps each bucket's last reading (it is a counter, not a rate), and
    ``fb_used`` keeps the bucket's peak so that the chart never hides an out-of-memory spike.
    """
    if points < 1:
        raise ValueError(f"points must be at least 1, got {points}")
    result: list[Sample] = []
    ordered = sorted(samples, key=lambda s: (s.gpu, s.time))
    for _, group in groupby(ordered, key=lambda s: s.gpu):
        series = list(group)
        size = -(-len(series) // points)  # ceiling division: buckets of equal length
        for start in range(0, len(series), size):
            bucket = series[start : start + size]
            averaged: dict[str, Any] = {name: _mean(getattr(s, name) for s in bucket) for name in MEASURES}
            peaks = [s.fb_used for s in bucket if s.fb_used is not None]
            averaged["fb_used"] = max(peaks) if peaks else None
            result.append(replace(bucket[-1], time=_mean(s.time for s in bucket) or bucket[-1].time, **averaged))
    return result

"""What a task's samples add up to, per GPU: the figures XCom ``gpu_profile`` carries.

Energy comes from the GPU's own counter where it has one (NVML's total energy consumption, in mJ
since the driver loaded: the difference between the first and last reading), else from power
integrated over time (trapezoids), which misses what happens between two samples.

A MIG slice has neither: NVML reports the whole GPU's power and energy counter. Its summary keeps
those figures but says whose they are (``energy_scope="gpu"``: the parent GPU's, shared with the
other slices), so that nothing reads them as the slice's own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import groupby
from typing import Any

from airflow_gpu.profiling.samples import Sample, downsample

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
    #: None: power and energy are this device's; "gpu": the whole GPU's, of which the task held a MIG slice.
    energy_scope: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


class Running:
    """One GPU's summary, kept up to date sample by sample in constant memory.

    A job that runs for days takes millions of samples; the summary must not need them all. Every
    figure is exact: sums and counts, peaks, the first and last energy-counter readings, power
    integrated as it comes (trapezoids between consecutive readings), and the utilisation values
    counted by value for the nearest-rank p95 (a GPU reports whole percent: at most 101 values).
    Samples must be added in time order.
    """

    def __init__(self, first: Sample) -> None:
        self.gpu, self.uuid, self.name = first.gpu, first.uuid, first.name
        self.samples = 0
        self.start = self.end = first.time
        self.util_n, self.util_sum, self.idle = 0, 0.0, 0
        self.util_counts: dict[float, int] = {}
        self.fb_peak: float | None = None
        self.fb_total: float | None = None
        self.power_n, self.power_sum, self.joules = 0, 0.0, 0.0
        self.power_peak: float | None = None
        self.last_power: tuple[float, float] | None = None
        self.counter_n = 0
        self.first_counter: float | None = None
        self.last_counter: float | None = None
        self.power_scope: str | None = None

    def add(self, sample: Sample) -> None:
        self.samples += 1
        self.end = sample.time
        self.power_scope = self.power_scope or sample.power_scope
        util, used, total, power = sample.gpu_util, sample.fb_used, sample.fb_total, sample.power_usage
        if util is not None:
            self.util_n += 1
            self.util_sum += util
            self.util_counts[util] = self.util_counts.get(util, 0) + 1
            self.idle += util <= IDLE_UTIL
        if used is not None:
            self.fb_peak = used if self.fb_peak is None else max(self.fb_peak, used)
        if total is not None:
            self.fb_total = total if self.fb_total is None else max(self.fb_total, total)
        if power is not None:
            self.power_n += 1
            self.power_sum += power
            self.power_peak = power if self.power_peak is None else max(self.power_peak, power)
            if self.last_power is not None:
                self.joules += (sample.time - self.last_power[0]) * (power + self.last_power[1]) / 2
            self.last_power = (sample.time, power)
        if sample.total_energy_consumption is not None:
            self.counter_n += 1
            if self.first_counter is None:
                self.first_counter = sample.total_energy_consumption
            self.last_counter = sample.total_energy_consumption

    def p95(self) -> float | None:
        if not self.util_n:
            return None
        rank, seen = max(1, math.ceil(0.95 * self.util_n)), 0
        for value in sorted(self.util_counts):
            seen += self.util_counts[value]
            if seen >= rank:
                return value
        return None  # unreachable: the counts add up to util_n

    def energy(self) -> tuple[float | None, str | None]:
        """From the GPU's own counter where it has one (it only rises), else power integrated over time."""
        first, last = self.first_counter, self.last_counter
        if self.counter_n >= 2 and first is not None and last is not None and last >= first:
            return (last - first) / 3_600_000, "counter"  # mJ -> Wh
        if self.power_n >= 2:
            return self.joules / 3600, "integrated power"
        return None, None

    def summary(self) -> GpuSummary:
        energy, source = self.energy()
        return GpuSummary(
            gpu=self.gpu,
            uuid=self.uuid,
            name=self.name,
            samples=self.samples,
            seconds=self.end - self.start,
            util_mean=self.util_sum / self.util_n if self.util_n else None,
            util_p95=self.p95(),
            fb_peak=self.fb_peak,
            fb_total=self.fb_total,
            power_mean=self.power_sum / self.power_n if self.power_n else None,
            power_peak=self.power_peak,
            energy_wh=energy,
            energy_source=source,
            idle_fraction=self.idle / self.util_n if self.util_n else None,
            energy_scope=self.power_scope,
        )


def summarise_gpu(series: Sequence[Sample]) -> GpuSummary:
    """One GPU's samples (any order) as its summary."""
    ordered = sorted(series, key=lambda s: s.time)
    running = Running(ordered[0])
    for sample in ordered:
        running.add(sample)
    return running.summary()


def summarise(samples: Sequence[Sample]) -> list[GpuSummary]:
    """Per GPU (by index), in index order."""
    ordered = sorted(samples, key=lambda s: (s.gpu, s.time))
    return [summarise_gpu(list(group)) for _, group in groupby(ordered, key=lambda s: s.gpu)]


def gpu_hours(summaries: Sequence[GpuSummary]) -> float:
    """GPU-hours: each GPU's sampled span, added up."""
    return sum(s.seconds for s in summaries) / 3600


class SampleStore:
    """What a sampler keeps: per GPU, the running summary of every sample and a series compacted
    to at most ``2 * keep`` points (consecutive samples averaged, ``downsample``), so that memory
    stays flat however long the job runs. Samples of one GPU must come in time order. The sampling
    thread adds while the entrypoint may read: every method holds the store's lock."""

    def __init__(self, keep: int = 2048) -> None:
        self.keep = keep
        self.taken = 0
        self._running: dict[int, Running] = {}
        self._series: dict[int, list[Sample]] = {}
        self._lock = threading.Lock()

    def add_all(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            for sample in samples:
                self._add(sample)

    def _add(self, sample: Sample) -> None:
        self.taken += 1
        running = self._running.get(sample.gpu)
        if running is None:
            running = self._running[sample.gpu] = Running(sample)
        running.add(sample)
        series = self._series.setdefault(sample.gpu, [])
        series.append(sample)
        if len(series) > 2 * self.keep:
            self._series[sample.gpu] = downsample(series, self.keep)

    def samples(self) -> list[Sample]:
        """The kept series, every GPU's."""
        with self._lock:
            return [sample for gpu in sorted(self._series) for sample in self._series[gpu]]

    def summaries(self) -> list[GpuSummary]:
        """Per GPU (by index), from every sample taken."""
        with self._lock:
            return [self._running[gpu].summary() for gpu in sorted(self._running)]


class KeepsSamples:
    """What both samplers give the entrypoint from their ``SampleStore``."""

    _store: SampleStore

    def samples(self) -> list[Sample]:
        """The kept series (compacted past ``SampleStore.keep`` points per GPU)."""
        return self._store.samples()

    def summaries(self) -> list[GpuSummary]:
        """Per GPU, from every sample taken."""
        return self._store.summaries()

    @property
    def taken(self) -> int:
        return self._store.taken

"""The sample model, nvidia-smi's CSV and the summary, without a GPU: the inputs are nvidia-smi's
documented output shapes (``nvidia-smi --help-query-gpu``; ``[N/A]`` and ``[Not Supported]`` for a
field the board does not report) and hand-made series whose answers are known."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.profiling import nvidia_smi
from airflow_gpu.profiling.samples import DCGM_NAMES, Sample, downsample
from airflow_gpu.profiling.summary import SampleStore, gpu_hours, percentile, summarise, summarise_gpu

# Two A100s, then a MIG-enabled one whose utilisation NVML cannot report, then a warning line.
A100_80 = "NVIDIA A100-SXM4-80GB"
CSV = [
    f"2026/11/23 14:50:01.123, 0, GPU-5fd4a1c7-2d13-4b7e-9f5c-1d2a3b4c5d6e, {A100_80}, "
    "87, 41, 61234, 81920, 312.45, 61, 1410",
    f"2026/11/23 14:50:01.125, 1, GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, {A100_80}, 0, 0, 4, 81920, 61.02, 34, 210",
    "2026/11/23 14:50:01.127, 2, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5e, NVIDIA A100-SXM4-40GB, "
    "[N/A], [N/A], 10240, 40960, [Not Supported], 40, 1410",
    "WARNING: infoROM is corrupted at gpu 0000:4E:00.0",
]


def test_nvidia_smi_lines_become_samples_with_unsupported_fields_as_none() -> None:
    first, idle, mig = nvidia_smi.parse(CSV)
    assert (first.gpu, first.name, first.gpu_util, first.fb_used, first.power_usage) == (
        0, "NVIDIA A100-SXM4-80GB", 87.0, 61234.0, 312.45,
    )  # fmt: skip
    assert idle.gpu_util == 0.0 and idle.gpu == 1  # zero is a reading, not a missing one
    assert mig.gpu_util is None and mig.power_usage is None and mig.fb_used == 10240.0
    assert first.total_energy_consumption is None  # nvidia-smi has no energy counter
    assert nvidia_smi.command(1000)[-1] == "-lms=1000"
    assert len(nvidia_smi.QUERY) == 11 and set(DCGM_NAMES) <= set(Sample.__dataclass_fields__)


def series(
    gpu: int, utils: list[float | None], power: float | None = 100.0, energy_step: float | None = None
) -> list[Sample]:
    """One reading a second; the energy counter (when there is one) grows ``energy_step`` mJ a second."""
    return [
        Sample(
            time=float(t),
            gpu=gpu,
            uuid=f"GPU-{gpu}",
            name="NVIDIA L4",
            gpu_util=u,
            fb_used=1000.0 + t,
            fb_total=23034.0,
            power_usage=power,
            total_energy_consumption=None if energy_step is None else t * energy_step,
        )
        for t, u in enumerate(utils)
    ]


def test_the_summary_of_known_series() -> None:
    busy, idle = summarise(series(0, [90.0] * 9 + [100.0], energy_step=100_000) + series(1, [0.0] * 10))
    assert busy.util_mean == pytest.approx(91.0) and busy.util_p95 == 100.0 and busy.idle_fraction == 0.0
    assert busy.fb_peak == 1009.0 and busy.seconds == 9.0
    assert busy.energy_source == "counter" and busy.energy_wh == pytest.approx(9 * 100_000 / 3_600_000)
    assert idle.energy_source == "integrated power" and idle.energy_wh == pytest.approx(9 * 100 / 3600)
    assert idle.idle_fraction == 1.0
    assert gpu_hours([busy, idle]) == pytest.approx(18 / 3600)  # two GPUs, 9 s each
    mig = summarise_gpu(series(2, [None] * 5, power=None))
    assert mig.util_mean is None and mig.energy_wh is None and mig.idle_fraction is None


@given(st.lists(st.floats(0, 100), min_size=1, max_size=200), st.floats(0, 1))
def test_percentile_is_a_reading_between_min_and_max(values: list[float], fraction: float) -> None:
    got = percentile(values, fraction)
    assert got in values and min(values) <= got <= max(values)
    assert sum(1 for v in values if v <= got) >= math.ceil(fraction * len(values))


@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=1, max_size=300), st.integers(1, 50))
def test_downsampling_bounds_the_series_and_keeps_the_memory_peak(utils: list[float | None], points: int) -> None:
    samples = series(0, utils) + series(1, utils)
    small = downsample(samples, points)
    for gpu in (0, 1):
        mine = [s for s in small if s.gpu == gpu]
        assert 1 <= len(mine) <= points
        assert max(s.fb_used or 0 for s in mine) == max(s.fb_used or 0 for s in samples if s.gpu == gpu)
        assert [s.time for s in mine] == sorted(s.time for s in mine)
    assert all(Sample.from_json(s.to_json()) == s for s in small)


def _reference(series: list[Sample]) -> dict[str, float | None]:
    """The summary computed the plain way, from the whole list, to hold the running one to."""
    util = [s.gpu_util for s in series if s.gpu_util is not None]
    power = [(s.time, s.power_usage) for s in series if s.power_usage is not None]
    counter = [s.total_energy_consumption for s in series if s.total_energy_consumption is not None]
    if len(counter) >= 2 and counter[-1] >= counter[0]:
        energy: float | None = (counter[-1] - counter[0]) / 3_600_000
    elif len(power) >= 2:
        energy = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(power)) / 3600
    else:
        energy = None
    return {
        "util_mean": sum(util) / len(util) if util else None,
        "util_p95": percentile(util, 0.95) if util else None,
        "idle_fraction": sum(u <= 5 for u in util) / len(util) if util else None,
        "power_peak": max((p for _, p in power), default=None),
        "energy_wh": energy,
    }


readings = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 100).map(float)),
        st.one_of(st.none(), st.floats(10, 700)),
        st.one_of(st.none(), st.integers(0, 10**9).map(float)),
    ),
    min_size=1,
    max_size=300,
)


@given(readings, st.integers(1, 20))
def test_the_bounded_store_summarises_every_sample_exactly(values: list[tuple[float | None, ...]], keep: int) -> None:
    """A day of samples must not all be kept: the store compacts its series to ``2 * keep`` points,
    yet its summary is the one the whole list gives."""
    series = [
        Sample(time=float(i), gpu=0, uuid="GPU-0", name="A10G", gpu_util=u, power_usage=p, total_energy_consumption=e)
        for i, (u, p, e) in enumerate(values)
    ]
    store = SampleStore(keep=keep)
    store.add_all(series)
    [got] = store.summaries()
    expected = _reference(series)
    for name, value in expected.items():
        assert getattr(got, name) == pytest.approx(value), name
    assert got.samples == store.taken == len(series) and got.seconds == len(series) - 1
    assert len(store.samples()) <= 2 * keep


def test_a_long_run_keeps_a_bounded_series() -> None:
    store = SampleStore(keep=100)
    for i in range(20_000):
        for gpu in (0, 1):
            store.add_all([Sample(time=float(i), gpu=gpu, uuid=f"GPU-{gpu}", name="H100", gpu_util=float(i % 101))])
    assert store.taken == 40_000 and len(store.samples()) <= 400
    assert [s.samples for s in store.summaries()] == [20_000, 20_000]

"""The NVML sampler for real (its thread, its start and stop, what it makes of each reading), over a
fake ``pynvml`` injected at the hardware boundary (``fake_nvml``: pynvml's names and return shapes,
no GPU here). One test uses the real nvidia-ml-py against this machine's missing driver."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_gpu.profiling.nvml import NvmlSampler, bus_id, cuda_version
from airflow_gpu.profiling.summary import summarise
from airflow_gpu.testing.polling import wait_for

from .fake_nvml import NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_SYSTEM, FakeGpu, FakeNvml

UUID_1 = "GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"


def rounds(sampler: NvmlSampler) -> int:
    return len({s.time for s in sampler.samples()})


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "airflow-gpu-nvml-sampler"]


def test_the_sampler_reads_every_gpu_in_its_thread_and_stops_cleanly() -> None:
    """Fake NVML at the hardware boundary; the thread, the units and the device description are real."""
    fake = FakeNvml(
        [
            FakeGpu(pci="00000000:07:00.0", nvlinks={1: 12}),
            FakeGpu(uuid=UUID_1, pci="00000000:0F:00.0", nvlinks={0: 12}, util=3, power_mw=61_020),
        ]
    )
    sampler = NvmlSampler(0.05, nvml=fake)
    assert sampler.start() and sampler.note is None
    wait_for(lambda: rounds(sampler) >= 3, timeout=10, what="three rounds of readings")
    sampler.stop()

    assert sampler_threads() == [] and not fake.initialised
    assert fake.calls["nvmlShutdown"] == 1 and fake.uninitialised_calls == 0  # nothing read after shutdown
    samples = sampler.samples()
    assert len(samples) == 2 * rounds(sampler)  # both GPUs in every round, the last one at stop()
    busy = [s for s in samples if s.gpu == 0]
    first = busy[0]
    assert (first.gpu_util, first.mem_copy_util, first.fb_used, first.fb_total) == (87.0, 41.0, 4096.0, 23028.0)
    assert (first.power_usage, first.gpu_temp, first.sm_clock) == (212.345, 61.0, 1710.0)  # mW -> W
    assert first.name == "NVIDIA A10G" and first.uuid.startswith("GPU-5fd4")
    energy = [s.total_energy_consumption for s in busy]
    assert all(e is not None for e in energy) and energy == sorted(energy)  # a counter, in mJ
    assert [s.time for s in busy] == sorted(s.time for s in busy)

    info = sampler.devices()
    assert (info["driver"], info["cuda"]) == ("550.54.15", "12.4")
    assert info["gpus"][1] == {
        "index": 1, "uuid": UUID_1, "name": "NVIDIA A10G", "fb_total": 23028.0, "mig": False,
        "pci": "00000000:0F:00.0",
    }  # fmt: skip
    assert info["topology"] == {"gpus": ["GPU0", "GPU1"], "matrix": [["X", "NV12"], ["NV12", "X"]]}
    busy_summary, idle_summary = summarise(samples)
    assert busy_summary.energy_source == "counter" and idle_summary.util_mean == 3.0

    sampler.stop()  # idempotent
    assert fake.calls["nvmlShutdown"] == 1


def test_unsupported_metrics_are_none_and_not_asked_again() -> None:
    """Fake NVML at the hardware boundary: a MIG-enabled GPU (no utilisation) with no power sensor, and
    a GPU without MIG, SM clock or energy counter; names as bytes, as nvidia-ml-py before 11.5 gave them."""
    fake = FakeNvml(
        [FakeGpu(mig=True, power_mw=None, temp=None), FakeGpu(uuid=UUID_1, mig=None, sm_clock=None, energy=False)],
        as_bytes=True,
    )
    sampler = NvmlSampler(0.05, nvml=fake)
    assert sampler.start()
    wait_for(lambda: rounds(sampler) >= 3, timeout=10, what="three rounds of readings")
    sampler.stop()

    mig = [s for s in sampler.samples() if s.gpu == 0]
    assert all(s.gpu_util is None and s.mem_copy_util is None for s in mig)
    assert all(s.power_usage is None and s.total_energy_consumption is None and s.gpu_temp is None for s in mig)
    assert all(s.fb_used == 4096.0 and s.sm_clock == 1710.0 for s in mig)
    other = [s for s in sampler.samples() if s.gpu == 1]
    assert all(s.sm_clock is None and s.total_energy_consumption is None and s.power_usage == 212.345 for s in other)
    assert all(s.gpu_util == 87.0 for s in other)
    # NotSupported is the GPU's answer for good: one call for GPU 0, one a round for GPU 1.
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 1 + rounds(sampler)
    assert fake.calls["nvmlDeviceGetClockInfo"] == rounds(sampler) + 1

    info = sampler.devices()
    assert [g["mig"] for g in info["gpus"]] == [True, None] and info["gpus"][0]["name"] == "NVIDIA A10G"
    assert info["driver"] == "550.54.15" and isinstance(info["gpus"][1]["uuid"], str)
    assert summarise(sampler.samples())[0].util_mean is None


def test_topology_labels_follow_nvidia_smi_topo() -> None:
    """Fake NVML at the hardware boundary: two GPUs on NVSwitches, one on PCIe across the CPU sockets;
    then four PCIe GPUs behind one switch each pair."""
    fake = FakeNvml(
        [
            FakeGpu(pci="00000000:07:00.0", switch_links=12, ancestor=NVML_TOPOLOGY_SYSTEM),
            FakeGpu(pci="00000000:0F:00.0", switch_links=12, ancestor=NVML_TOPOLOGY_SYSTEM),
            FakeGpu(pci="00000000:87:00.0", ancestor=NVML_TOPOLOGY_SYSTEM),
        ]
    )
    sampler = NvmlSampler(1.0, nvml=fake)
    assert sampler.start()
    sampler.stop()
    assert sampler.devices()["topology"]["matrix"] == [["X", "NV12", "SYS"], ["NV12", "X", "SYS"], ["SYS", "SYS", "X"]]

    pcie = FakeNvml([FakeGpu(pci=f"00000000:{i:02X}:00.0", ancestor=NVML_TOPOLOGY_SINGLE) for i in range(4)])
    sampler = NvmlSampler(1.0, nvml=pcie)
    assert sampler.start()
    sampler.stop()
    matrix = sampler.devices()["topology"]["matrix"]
    assert [row[i] for i, row in enumerate(matrix)] == ["X"] * 4
    assert {cell for row in matrix for cell in row} == {"X", "PIX"}


def test_no_driver_and_no_gpu_are_unavailable_with_a_note_never_an_error() -> None:
    """Fake NVML at the hardware boundary: ``nvmlInit`` raising ``NVMLError_LibraryNotFound`` (no driver),
    then a driver that sees no GPU."""
    fake = FakeNvml([], no_driver=True)
    sampler = NvmlSampler(1.0, nvml=fake)
    assert sampler.start() is False
    assert sampler.note == "NVML: no NVIDIA driver (NVML Shared Library Not Found)"
    sampler.stop()
    assert sampler.samples() == [] and sampler.devices()["gpus"] == [] and fake.calls["nvmlShutdown"] == 0

    empty = FakeNvml([])
    sampler = NvmlSampler(1.0, nvml=empty)
    assert sampler.start() is False and sampler.note == "NVML: no GPU is visible to this container"
    assert empty.calls["nvmlShutdown"] == 1 and not empty.initialised
    with pytest.raises(ValueError, match="positive"):
        NvmlSampler(0, nvml=empty)


def test_the_real_nvidia_ml_py_on_this_machine() -> None:
    """The real pynvml, no fake: without a driver (this machine) a note; with one (a GPU machine) readings."""
    pytest.importorskip("pynvml")
    sampler = NvmlSampler(0.05)
    if sampler.start():
        wait_for(lambda: rounds(sampler) >= 2, timeout=10, what="two rounds of readings")
        sampler.stop()
        assert sampler.samples() and sampler.devices()["driver"]
    else:
        assert sampler.note is not None and sampler.note.startswith("NVML: no NVIDIA driver (")
        assert sampler.samples() == []


def test_pci_ids_and_cuda_versions_read_as_nvidia_smi_prints_them() -> None:
    """Pure conversions of NVML's values (no NVML involved)."""
    assert bus_id(b"0000:07:00.0") == bus_id("00000000:07:00.0") == "00000000:07:00.0"
    assert bus_id("07:00.0") == "00000000:07:00.0" and bus_id("00000000:0f:00.0") == "00000000:0F:00.0"
    assert (cuda_version(12040), cuda_version(11080), cuda_version(12080)) == ("12.4", "11.8", "12.8")


def four_gpus(**third: Any) -> FakeNvml:
    """A four-GPU node as NVML on the host sees it, every GPU busy (fake NVML at the hardware boundary)."""
    gpus = [
        FakeGpu(uuid=f"GPU-{i}a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5{i}", pci=f"00000000:{7 + i:02X}:00.0")
        for i in range(4)
    ]
    gpus[2] = FakeGpu(**{**vars(gpus[2]), **third})
    return FakeNvml(gpus)


def sampled(fake: FakeNvml, env: dict[str, str]) -> NvmlSampler:
    sampler = NvmlSampler(0.05, nvml=fake, env=env)
    assert sampler.start(), sampler.note
    wait_for(lambda: rounds(sampler) >= 2, timeout=10, what="two rounds of readings")
    sampler.stop()
    return sampler


def test_only_the_gpus_cuda_visible_devices_gives_the_task_are_sampled() -> None:
    """Fake NVML at the hardware boundary: four GPUs, the task given GPUs 2 and 3."""
    sampler = sampled(four_gpus(), {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert {s.gpu for s in sampler.samples()} == {2, 3}
    assert [s.gpu for s in sampler.summaries()] == [2, 3]
    info = sampler.devices()
    assert [g["index"] for g in info["gpus"]] == [2, 3] and info["gpus"][0]["uuid"].startswith("GPU-2")
    assert info["topology"] == {"gpus": ["GPU2", "GPU3"], "matrix": [["X", "PHB"], ["PHB", "X"]]}
    assert all(s.power_scope is None for s in sampler.samples())


def test_uuids_and_mig_devices_name_the_gpus_sampled() -> None:
    """Fake NVML at the hardware boundary: GPUs named by UUID (and a prefix of one); then a MIG
    device of GPU 2, resolved to its GPU through NVML, whose power and energy are the whole GPU's."""
    uuids = [f"GPU-{i}a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5{i}" for i in range(4)]
    by_uuid = sampled(four_gpus(), {"NVIDIA_VISIBLE_DEVICES": f"{uuids[3]},{uuids[1]}"})
    assert {s.gpu for s in by_uuid.samples()} == {1, 3} and by_uuid.note is None
    assert {s.gpu for s in sampled(four_gpus(), {"CUDA_VISIBLE_DEVICES": uuids[0][:10]}).samples()} == {0}

    mig = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
    fake = four_gpus(mig=True, migs=[mig])
    slice_ = sampled(fake, {"NVIDIA_VISIBLE_DEVICES": mig})
    samples = slice_.samples()
    assert {s.gpu for s in samples} == {2} and all(s.power_scope == "gpu" for s in samples)
    assert fake.calls["nvmlDeviceGetDeviceHandleFromMigDeviceHandle"] == 1
    (summary,) = slice_.summaries()
    assert summary.energy_scope == "gpu" and summary.energy_source == "counter"


def test_no_gpu_of_the_task_is_no_sampler_with_a_note() -> None:
    """Fake NVML at the hardware boundary: NVML sees four GPUs, the runtime gave the task none."""
    fake = four_gpus()
    sampler = NvmlSampler(0.05, nvml=fake, env={"NVIDIA_VISIBLE_DEVICES": "none"})
    assert sampler.start() is False
    assert sampler.note == "NVML: none of the 4 GPU(s) seen is the task's (NVIDIA_VISIBLE_DEVICES='none')"
    assert not fake.initialised and fake.reading_calls == 0

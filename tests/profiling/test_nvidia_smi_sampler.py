"""The nvidia-smi sampler for real (its child process, reader thread, stop and reaping) against a fake
``nvidia-smi`` on PATH at the hardware boundary (``fake_nvidia_smi``: a script printing nvidia-smi's
CSV, ``topo -m`` and header formats), and the parsers of those formats on nvidia-smi's own output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_gpu.profiling.nvidia_smi import NvidiaSmiSampler, parse_cuda, parse_devices, parse_topology
from airflow_gpu.testing.polling import wait_for

from .fake_nvidia_smi import gpu, install


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH, for the fake nvidia-smi."""
    where = tmp_path / "bin"
    where.mkdir()
    monkeypatch.setenv("PATH", f"{where}{os.pathsep}{os.environ['PATH']}")
    return where


def test_the_sampler_reads_nvidia_smi_lines_and_reaps_its_child(on_path: Path) -> None:
    """Fake nvidia-smi on PATH at the hardware boundary: two A100s, the second MIG-enabled without power."""
    install(on_path, [gpu(0), gpu(1, mig=True, power=None)])
    sampler = NvidiaSmiSampler(0.05)
    assert sampler.start() and sampler.note is None
    pid = sampler.pid
    assert pid is not None and Path(f"/proc/{pid}").exists()
    wait_for(lambda: len(sampler.samples()) >= 6, timeout=10, what="three rounds of nvidia-smi lines")
    sampler.stop()

    assert sampler.pid is None and not Path(f"/proc/{pid}").exists()  # terminated and reaped: no zombie
    samples = sampler.samples()
    first = next(s for s in samples if s.gpu == 0)
    assert (first.gpu_util, first.fb_used, first.fb_total, first.power_usage, first.sm_clock) == (
        87.0, 61234.0, 81920.0, 312.45, 1410.0,
    )  # fmt: skip
    mig = [s for s in samples if s.gpu == 1]
    assert mig and all(s.gpu_util is None and s.power_usage is None and s.fb_used == 61234.0 for s in mig)
    info = sampler.devices()
    assert (info["driver"], info["cuda"]) == ("550.54.15", "12.4")
    assert info["gpus"][1] == {
        "index": 1, "uuid": "GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c01", "name": "NVIDIA A100-SXM4-80GB",
        "fb_total": 81920.0, "mig": True, "pci": "00000000:08:00.0",
    }  # fmt: skip
    assert info["topology"] == {"gpus": ["GPU0", "GPU1"], "matrix": [["X", "NV12"], ["NV12", "X"]]}
    sampler.stop()  # idempotent


def test_one_gpu_needs_no_topology_run(on_path: Path) -> None:
    """Fake nvidia-smi at the hardware boundary, one A100: the matrix of one GPU is ``X`` without
    asking, and each nvidia-smi start costs the container a driver initialisation."""
    install(on_path, [gpu(0)])
    sampler = NvidiaSmiSampler(0.05)
    assert sampler.start()
    sampler.stop()

    assert sampler.devices()["topology"] == {"gpus": ["GPU0"], "matrix": [["X"]]}
    calls = [json.loads(line) for line in (on_path / "fake-nvidia-smi.calls").read_text().splitlines()]
    assert calls and not [c for c in calls if c[:1] == ["topo"]]


def test_missing_failing_or_dying_nvidia_smi_is_a_note(on_path: Path, tmp_path: Path) -> None:
    """Fake nvidia-smi at the hardware boundary: absent, a driver that is not loaded, one that stops
    answering after two rounds."""
    absent = NvidiaSmiSampler(1.0)
    assert absent.start() is False and absent.note == "nvidia-smi: nvidia-smi not found on PATH"
    absent.stop()

    install(on_path, [gpu(0)], not_loaded=True)
    broken = NvidiaSmiSampler(1.0)
    assert broken.start() is False and broken.pid is None
    assert broken.note is not None and "couldn't communicate with the NVIDIA driver" in broken.note

    install(on_path, [gpu(0)], stop_after=2)
    dying = NvidiaSmiSampler(0.05)
    assert dying.start()
    wait_for(lambda: dying.note, timeout=10, what="the sampler to notice nvidia-smi's exit")
    assert dying.note == (
        "nvidia-smi: sampling stopped early "
        "(exit code 15: Unable to determine the device handle for GPU0000:00:1E.0: Unknown Error)"
    )
    dying.stop()
    assert len([s for s in dying.samples() if s.gpu == 0]) >= 2


# `nvidia-smi topo -m` on an 8-GPU HGX A100 with one NIC (nvidia-smi 550: tab-separated, legend after).
HGX = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    + "".join(
        f"GPU{i}\t" + "\t".join(" X " if i == j else "NV12" for j in range(8)) + "\tSYS\t0-47\t0\t\tN/A\n"
        for i in range(8)
    )
    + "NIC0\t"
    + "\t".join(["SYS"] * 8)
    + "\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def test_topo_matrices_as_nvidia_smi_prints_them() -> None:
    """nvidia-smi's ``topo -m`` formats: 550's, an older driver's ``SOC`` and spaces, an underlined header."""
    hgx = parse_topology(HGX)
    assert hgx is not None and hgx["gpus"] == [f"GPU{i}" for i in range(8)]
    assert hgx["matrix"][3] == ["NV12", "NV12", "NV12", "X", "NV12", "NV12", "NV12", "NV12"]
    old = "        GPU0    GPU1    CPU Affinity\nGPU0     X      SOC     0-9\nGPU1    SOC      X      10-19\n"
    assert parse_topology(old) == {"gpus": ["GPU0", "GPU1"], "matrix": [["X", "SYS"], ["SYS", "X"]]}
    underlined = "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tPHB\t0-63\nGPU1\tPHB\t X \t0-63\n"
    assert parse_topology(underlined) == {"gpus": ["GPU0", "GPU1"], "matrix": [["X", "PHB"], ["PHB", "X"]]}
    assert parse_topology("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n") == {"gpus": ["GPU0"], "matrix": [["X"]]}
    assert parse_topology("No devices were found") is None
    assert parse_topology("\tGPU0\tGPU1\nGPU0\t X \tPHB\n") is None  # a row missing


def test_device_lines_and_cuda_versions() -> None:
    """nvidia-smi's ``--query-gpu`` device lines, its status header and its ``--version`` output."""
    gpus, driver = parse_devices(
        [
            "0, GPU-5fd4a1c7-2d13-4b7e-9f5c-1d2a3b4c5d6e, NVIDIA A10G, 23028, [N/A], 00000000:00:1E.0, 550.54.15",
            "1, GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, NVIDIA A100-SXM4-40GB, 40960, Enabled, 00000000:07:00.0, "
            "550.54.15",
            "No devices were found",
        ]
    )
    assert driver == "550.54.15" and [g["mig"] for g in gpus] == [None, True]
    assert gpus[0] == {
        "index": 0, "uuid": "GPU-5fd4a1c7-2d13-4b7e-9f5c-1d2a3b4c5d6e", "name": "NVIDIA A10G", "fb_total": 23028.0,
        "mig": None, "pci": "00000000:00:1E.0",
    }  # fmt: skip
    header = "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |"
    version = "NVIDIA-SMI version  : 570.133.20\nNVML version        : 570.133\nCUDA Version        : 12.8"
    assert (parse_cuda(header), parse_cuda(version), parse_cuda("")) == ("12.4", "12.8", None)

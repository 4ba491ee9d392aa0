"""The nvidia-smi sampler for real (its child process, reader thread, stop and reaping) against a fake
``nvidia-smi`` on PATH at the hardware boundary (``fake_nvidia_smi``: a script printing nvidia-smi's
CSV, ``topo -m`` and header formats), and the parsers of those formats on nvidia-smi's own output."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_gpu.profiling.nvidia_smi import (
    NvidiaSmiSampler,
    parse_cuda,
    parse_devices,
    parse_mig_parents,
    parse_topology,
)
from airflow_gpu.testing import gpus
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


def calls_of(on_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (on_path / "fake-nvidia-smi.calls").read_text().splitlines()]


def test_only_the_gpus_cuda_visible_devices_gives_the_task_are_sampled(on_path: Path) -> None:
    """Fake nvidia-smi on PATH at the hardware boundary: four A100s, the task given GPUs 2 and 3;
    nvidia-smi is asked for those two by UUID (``--id=``), for the samples and the last reading."""
    install(on_path, [gpu(i) for i in range(4)])
    sampler = NvidiaSmiSampler(0.05, env={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert sampler.start() and sampler.note is None
    wait_for(lambda: len(sampler.samples()) >= 4, timeout=10, what="two rounds of nvidia-smi lines")
    sampler.stop()

    assert {s.gpu for s in sampler.samples()} == {2, 3}
    info = sampler.devices()
    assert [g["index"] for g in info["gpus"]] == [2, 3]
    assert info["topology"] == {"gpus": ["GPU2", "GPU3"], "matrix": [["X", "NV12"], ["NV12", "X"]]}
    ids = f"--id={gpu(2)['uuid']},{gpu(3)['uuid']}"
    sampling = [c for c in calls_of(on_path) if any(a.startswith("--query-gpu=timestamp") for a in c)]
    assert len(sampling) == 2 and all(ids in c for c in sampling)  # the -lms child and the last reading


def test_a_mig_device_is_sampled_as_its_gpu_whose_power_is_the_whole_gpus(on_path: Path) -> None:
    """Fake nvidia-smi at the hardware boundary: GPU 1 of two in MIG mode, the task given one of its
    MIG devices; ``nvidia-smi -L`` says which GPU that is."""
    mig = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
    install(on_path, [gpu(0), gpu(1, mig=True, migs=[["1g.10gb", "MIG-0000"], ["3g.40gb", mig]])])
    sampler = NvidiaSmiSampler(0.05, env={"NVIDIA_VISIBLE_DEVICES": mig})
    assert sampler.start()
    wait_for(lambda: len(sampler.samples()) >= 2, timeout=10, what="two nvidia-smi lines")
    sampler.stop()

    samples = sampler.samples()
    assert {s.gpu for s in samples} == {1} and all(s.power_scope == "gpu" and s.power_usage for s in samples)
    (summary,) = sampler.summaries()
    assert summary.energy_scope == "gpu" and summary.energy_source == "integrated power"
    assert ["-L"] in calls_of(on_path)


def test_none_of_the_gpus_is_the_tasks(on_path: Path) -> None:
    """Fake nvidia-smi at the hardware boundary: two GPUs seen, the runtime gave the task none."""
    install(on_path, [gpu(0), gpu(1)])
    sampler = NvidiaSmiSampler(0.05, env={"NVIDIA_VISIBLE_DEVICES": "none"})
    assert sampler.start() is False and sampler.pid is None
    assert sampler.note == "nvidia-smi: none of the 2 GPU(s) seen is the task's (NVIDIA_VISIBLE_DEVICES='none')"


def test_nvidia_smi_lists_mig_devices_under_their_gpu() -> None:
    """``nvidia-smi -L`` as drivers 470 and later print it (MIG devices indented under their GPU)."""
    listed = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
        "  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d)\n"
    )
    assert parse_mig_parents(listed) == {
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f": "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb": "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
    }


def test_the_emulators_nvidia_smi_answers_for_the_gpus_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulators' ``nvidia-smi`` (``airflow_gpu.testing.gpus``) takes ``--id=`` as nvidia-smi does:
    the sampler on a worker with three emulated GPUs, the task given GPU 1."""
    devices = gpus.devices("A10G", [0, 1, 2], "node-1")
    env = gpus.install(devices, tmp_path / "gpus")
    monkeypatch.setenv("PATH", f"{env[gpus.SMI_DIR_ENV]}{os.pathsep}{os.environ['PATH']}")
    sampler = NvidiaSmiSampler(0.05, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert sampler.start(), sampler.note
    wait_for(lambda: len(sampler.samples()) >= 2, timeout=10, what="two nvidia-smi lines")
    sampler.stop()
    assert {(s.gpu, s.uuid) for s in sampler.samples()} == {(1, devices[1].uuid)}

    smi = str(Path(env[gpus.SMI_DIR_ENV]) / "nvidia-smi")
    unknown = subprocess.run(
        [smi, "--query-gpu=index", "--format=csv,noheader", "--id=GPU-nope"], capture_output=True, text=True
    )
    assert (unknown.returncode, unknown.stdout.strip()) == (6, "No devices were found")

"""Emulated GPUs: a container the emulators give GPUs sees them as a GPU container does.

Through the unmodified kubernetes client and boto3 only. What is checked is what the NVIDIA
device plugin and container toolkit promise a container: ``NVIDIA_VISIBLE_DEVICES`` names its
devices, ``nvidia-smi`` lists exactly those, two containers never share one, and a container
without GPUs sees none of them.
"""

from __future__ import annotations

import sys
from typing import Any

from kubernetes import client

from airflow_gpu.profiling.nvidia_smi import command, parse
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.testing.batch.api import final, log_lines, register
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for

LIST = (
    "import os, subprocess, shutil\n"
    "print('visible', os.environ.get('NVIDIA_VISIBLE_DEVICES', ''))\n"
    "smi = shutil.which('nvidia-smi')\n"
    "print('smi', 'none' if smi is None else 'found')\n"
    "if smi:\n"
    "    print(subprocess.run([smi, '--query-gpu=index,uuid,name,memory.total', '--format=csv,noheader,nounits'],"
    " capture_output=True, text=True).stdout, end='')\n"
)
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def gpu_pod(name: str, gpus: int, script: str = LIST, node: str = "gpu-spot-1") -> dict[str, Any]:
    return pod_manifest(
        name,
        [sys.executable, "-c", script],
        nodeSelector={"kubernetes.io/hostname": node},
        tolerations=GPU_TOLERATION,
        container={"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {},
    )


def pod_log(core: client.CoreV1Api, name: str) -> list[str]:
    wait_for(phase_is(core, name, "Succeeded", "Failed"))
    data: bytes = core.read_namespaced_pod_log(name, "default", _preload_content=False).data
    return data.decode().splitlines()


def devices(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    visible = next(line.split(" ", 1)[1] if " " in line else "" for line in lines if line.startswith("visible"))
    rows = [[cell.strip() for cell in line.split(",")] for line in lines if line[:1].isdigit()]
    return [v for v in visible.split(",") if v], rows


def test_a_pod_sees_the_gpus_it_was_allocated_and_no_other_pod_gets_them(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", gpu_pod("two-gpus", 2))
    core.create_namespaced_pod("default", gpu_pod("three-gpus", 3))
    first, second = devices(pod_log(core, "two-gpus")), devices(pod_log(core, "three-gpus"))
    for (visible, rows), count in ((first, 2), (second, 3)):
        assert len(visible) == count
        assert [row[0] for row in rows] == [str(i) for i in range(count)]  # numbered from 0 in the container
        assert [row[1] for row in rows] == visible  # the UUIDs NVIDIA_VISIBLE_DEVICES names
        assert {row[2] for row in rows} == {"NVIDIA H100 80GB HBM3"}  # the node's product
        assert all(80_000 < float(row[3]) <= 81_920 for row in rows)
    assert not set(first[0]) & set(second[0])  # the device plugin never hands a device out twice


def test_a_pod_without_gpus_sees_none(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", gpu_pod("no-gpus", 0))
    lines = pod_log(core, "no-gpus")
    assert "visible " in lines
    assert "smi found" not in lines or not any(line[:1].isdigit() for line in lines)


def test_readings_follow_the_workload(core: client.CoreV1Api) -> None:
    """A workload that keeps one core busy reads as GPU 0 busy and GPU 1 idle, in nvidia-smi's CSV.

    How busy "busy" is depends on the machine: on two loaded cores (make test in CI) the spinning loop
    got 30 % of a core. So the workload measures its own share of a core (CPU time over wall time) and
    GPU 0's busiest reading must reach most of that share: the emulated GPU follows the work it was given.
    """
    busy = (
        "import subprocess, shutil, time, threading\n"
        f"smi = subprocess.Popen({command(200)!r}, stdout=subprocess.PIPE, text=True)\n"
        "start, cpu = time.monotonic(), time.process_time()\n"
        "while time.monotonic() < start + 1.5: pass\n"
        "share = (time.process_time() - cpu) / (time.monotonic() - start) * 100\n"
        "smi.terminate(); print(smi.communicate()[0], end='')\n"
        "print('share', round(share, 1))\n"
    )
    core.create_namespaced_pod("default", gpu_pod("busy", 2, busy, node="gpu-spot-2"))
    lines = pod_log(core, "busy")
    share = next(float(line.split()[1]) for line in lines if line.startswith("share "))
    samples = list(parse(lines))
    assert {s.gpu for s in samples} == {0, 1}
    gpu0 = [s.gpu_util for s in samples if s.gpu == 0 and s.gpu_util is not None]
    gpu1 = [s.gpu_util for s in samples if s.gpu == 1 and s.gpu_util is not None]
    assert share >= 10, f"the loop ran {share} % of a core: too starved to tell busy from idle"
    assert max(gpu0) >= 0.7 * share, (gpu0, share)  # the busy core shows on GPU 0 ...
    assert max(gpu1) <= 5  # ... and leaves GPU 1 idle (GPU 1 reads the second core's worth)
    assert all(s.power_usage is not None and s.power_usage > 0 for s in samples)


def test_a_batch_job_sees_its_gpus(batch_emulator: BatchEmulator) -> None:
    batch = batch_emulator.client("batch")
    definition = register(batch, "lists-gpus", [sys.executable, "-c", LIST], gpus=4)
    job = batch.submit_job(jobName="lists", jobQueue="gpu-on-demand", jobDefinition=definition)["jobId"]
    ended = final(batch, job)
    assert ended["status"] == "SUCCEEDED"
    lines = wait_for(lambda: (got := log_lines(batch_emulator, ended["container"]["logStreamName"])) and any(
        line[:1].isdigit() for line in got) and got)  # fmt: skip
    visible, rows = devices(lines)
    assert len(visible) == 4 and [row[1] for row in rows] == visible

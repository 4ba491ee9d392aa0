"""CPU cost of sampling the GPUs: our samplers at 1 Hz and 10 Hz, beside nvidia-smi spawned once per sample.

What is measured is CPU time over a window of wall-clock time while sampling runs (all threads of
this process, plus the children it reaped in the window), as a percentage of one core. There is no
GPU on the machines that run this, so:

- the NVML sampler reads a stand-in ``pynvml`` whose calls return constants and cost nothing: its
  figure is the sampler's own overhead (thread wake-ups, readings turned into samples, locking),
  not NVML's or the driver's (real NVML calls are ioctls into the driver; they are not included);
- the baseline, a naive profiler, spawns ``nvidia-smi --query-gpu`` once per sample; the stand-in is
  a shell script printing the CSV, so its figure is a lower bound, the cost of a process spawn (the
  real nvidia-smi also loads NVML and initialises every GPU on each call);
- the ``nvidia-smi -lms`` sampler is measured on our side only (the reader thread): the long-lived
  nvidia-smi it reads is the driver's tool and is not counted.

    python bench/profiling_sampler.py [--gpus 8] [--seconds 8]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from airflow_gpu.profiling.nvidia_smi import QUERY, NvidiaSmiSampler, parse
from airflow_gpu.profiling.nvml import NvmlSampler
from airflow_gpu.profiling.samples import Sample


class ZeroCostNvml:
    """pynvml's names, every call a constant: what remains is the sampler's own cost."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # pynvml's names, here and in the methods
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    UTIL = SimpleNamespace(gpu=87, memory=41)
    MEMORY = SimpleNamespace(total=81559 * 2**20, used=61234 * 2**20, free=20325 * 2**20)

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-00000000-0000-0000-0000-0000000000{handle:02d}"

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return self.UTIL

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return self.MEMORY

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 312_450

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return 10**9

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 61

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        return 1980

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        return [0, 0]

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + handle:02X}:00.0".encode())

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        raise self.NVMLError_NotSupported()

    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        return 30


# A stand-in nvidia-smi without Python: fixed readings, the formats the samplers parse.
NVIDIA_SMI = """#!/bin/sh
uuid=GPU-00000000-0000-0000-0000-0000000000
name='NVIDIA H100 80GB HBM3'
samples() {
  i=0
  while [ $i -lt %(gpus)d ]; do
    printf "2026/11/23 14:50:01.123, %%d, $uuid%%02d, $name, 87, 41, 61234, 81559, 312.45, 61, 1980\\n" $i $i
    i=$((i + 1))
  done
}
case "$1" in
  --query-gpu=timestamp*)
    case "$*" in
      *-lms=*)
        seconds=$(awk "BEGIN { print ${*##*-lms=} / 1000 }")
        while :; do samples; sleep "$seconds"; done ;;
      *) samples ;;
    esac ;;
  --query-gpu=index*)
    i=0
    while [ $i -lt %(gpus)d ]; do
      printf "%%d, $uuid%%02d, $name, 81559, Disabled, 00000000:%%02X:00.0, 550.54.15\\n" $i $i $((24 + i))
      i=$((i + 1))
    done ;;
  topo) printf '\\tGPU0\\tCPU Affinity\\nGPU0\\t X \\t0-7\\n' ;;
  *) echo '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |' ;;
esac
"""


def _cpu_seconds() -> float:
    """This process's CPU time (every thread) plus that of the children it has reaped."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _window(seconds: float) -> float:
    """Percent of one core used over ``seconds`` of wall-clock time from now."""
    cpu, wall = _cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return 100 * (_cpu_seconds() - cpu) / (time.monotonic() - wall)


def nvml_sampler(gpus: int, hertz: float, seconds: float, _: Path) -> tuple[float, int]:
    sampler = NvmlSampler(1 / hertz, nvml=ZeroCostNvml(gpus))
    assert sampler.start(), sampler.note
    percent = _window(seconds)
    sampler.stop()
    return percent, len(sampler.samples())


def lms_sampler(gpus: int, hertz: float, seconds: float, smi: Path) -> tuple[float, int]:
    sampler = NvidiaSmiSampler(1 / hertz, executable=str(smi))
    assert sampler.start(), sampler.note
    percent = _window(seconds)
    sampler.stop()
    return percent, len(sampler.samples())


def spawn_per_sample(gpus: int, hertz: float, seconds: float, smi: Path) -> tuple[float, int]:
    """The naive baseline: one ``nvidia-smi --query-gpu`` process per sample, in a thread."""
    stopping = threading.Event()
    taken: list[Sample] = []

    def loop() -> None:
        due = time.monotonic()
        while not stopping.is_set():
            done = subprocess.run(
                [str(smi), f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                check=True,
            )
            taken.extend(parse(done.stdout.splitlines()))
            due += 1 / hertz
            stopping.wait(max(0.0, due - time.monotonic()))

    thread = threading.Thread(target=loop)
    thread.start()
    percent = _window(seconds)
    stopping.set()
    thread.join()
    return percent, len(taken)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window per row")
    args = parser.parse_args()
    cases: list[tuple[str, Callable[[int, float, float, Path], tuple[float, int]]]] = [
        ("NVML sampler thread (stand-in NVML, zero-cost calls)", nvml_sampler),
        ("nvidia-smi -lms sampler (our reader thread only)", lms_sampler),
        ("baseline: nvidia-smi spawned per sample (stand-in script)", spawn_per_sample),
    ]
    with tempfile.TemporaryDirectory() as scratch:
        smi = Path(scratch) / "nvidia-smi"
        smi.write_text(NVIDIA_SMI % {"gpus": args.gpus})
        smi.chmod(0o755)
        results = {(name, hertz): run(args.gpus, hertz, args.seconds, smi) for name, run in cases for hertz in (1, 10)}
    print(f"CPU while sampling {args.gpus} stand-in GPUs, {args.seconds:g} s per row, % of one core (lower is better)")
    print("  real NVML and driver call costs are not included: there is no GPU here (see the docstring)")
    baseline = "baseline: nvidia-smi spawned per sample (stand-in script)"
    for (name, hertz), (percent, samples) in results.items():
        base = results[(baseline, hertz)][0]
        versus = "" if name == baseline else f"   {base / percent:8.0f}x less than the baseline" if percent else ""
        print(f"  {name:<58} {hertz:>2} Hz {percent:8.4f} %  ({samples:5d} samples){versus}")
    print("  target: under 0.5 % of one core at 1 Hz")


if __name__ == "__main__":
    main()

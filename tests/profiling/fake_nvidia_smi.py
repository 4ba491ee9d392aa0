"""A stand-in ``nvidia-smi``, the hardware boundary of the nvidia-smi sampler; standard library only.

``install`` writes an ``nvidia-smi`` shell script into a directory (put it first on ``PATH``) that
runs this file with a JSON configuration. It answers what the sampler asks, in nvidia-smi's own
output formats: ``--query-gpu=<fields> --format=csv,noheader,nounits [-lms=N]`` (one line per GPU
per interval, ``[N/A]`` for what a MIG-enabled GPU does not report), ``topo -m`` (tab-separated,
the legend after it, as nvidia-smi 550 prints it) and the status header that carries the CUDA
version. A driver that is not loaded reads as nvidia-smi's message and exit code 9. ``-i`` /
``--id=`` takes a comma-separated list of GPU indices, UUIDs or PCI bus ids (as ``nvidia-smi -i
1,2,4``); one that names no GPU is nvidia-smi's "No devices were found", exit code 6. ``-L`` lists
each GPU with its MIG devices under it, as nvidia-smi 470 and later print them.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HEADER = """{date}
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<9}|
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|"""

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
"""

NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def value(field: str, gpu: dict[str, Any], config: dict[str, Any]) -> str:
    mig = gpu.get("mig", False)
    values = {
        "timestamp": datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3],
        "index": gpu["index"],
        "uuid": gpu["uuid"],
        "name": gpu["name"],
        "utilization.gpu": "[N/A]" if mig else gpu["util"],
        "utilization.memory": "[N/A]" if mig else gpu["mem_util"],
        "memory.used": gpu["used"],
        "memory.total": gpu["total"],
        "power.draw": "[N/A]" if gpu.get("power") is None else f"{gpu['power']:.2f}",
        "temperature.gpu": gpu["temp"],
        "clocks.sm": gpu["sm_clock"],
        "mig.mode.current": "Enabled" if mig else "Disabled",
        "pci.bus_id": gpu["pci"],
        "driver_version": config["driver"],
    }
    return str(values[field])


def chosen(args: list[str], gpus: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The GPUs ``-i``/``--id`` names (all without it), in nvidia-smi's order; None if one names none."""
    ids = None
    for i, arg in enumerate(args):
        if arg.startswith(("--id=", "-i=")):
            ids = arg.split("=", 1)[1]
        elif arg in ("-i", "--id") and i + 1 < len(args):
            ids = args[i + 1]
    if ids is None:
        return gpus
    wanted = [w.strip() for w in ids.split(",")]
    found = [g for g in gpus if {str(g["index"]), g["uuid"], g["pci"]} & set(wanted)]
    return found if len(found) == len(wanted) else None


def query(args: list[str], config: dict[str, Any]) -> int:
    fields = next(a for a in args if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
    loop = next((a for a in args if a.startswith("-lms=")), None)
    gpus = chosen(args, config["gpus"])
    if gpus is None:
        print("No devices were found")
        return 6
    printed = 0
    while True:
        for gpu in gpus:
            print(", ".join(value(f, gpu, config) for f in fields), flush=True)
        printed += 1
        if loop is None:
            return 0
        if config.get("stop_after") and printed >= config["stop_after"]:
            print("Unable to determine the device handle for GPU0000:00:1E.0: Unknown Error", flush=True)
            return 15
        time.sleep(int(loop.split("=", 1)[1]) / 1000)  # the workload's pacing: nvidia-smi -lms waits so long


def topology(config: dict[str, Any]) -> int:
    gpus = config["gpus"]
    print("\t" + "".join(f"GPU{g['index']}\t" for g in gpus) + "NIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    for a in gpus:
        cells = [" X " if a is b else config["link"] for b in gpus]
        print(f"GPU{a['index']}\t" + "\t".join(cells) + "\tSYS\t0-47\t0\t\tN/A")
    print("NIC0\t" + "\t".join("SYS" for _ in gpus) + "\t X ")
    print(LEGEND)
    return 0


def main(config_path: str, args: list[str]) -> int:
    config = json.loads(Path(config_path).read_text())
    with Path(config_path).with_suffix(".calls").open("a") as calls:  # what the caller asked, in order
        calls.write(json.dumps(args) + "\n")
    if config.get("not_loaded"):
        print(NOT_LOADED)
        return 9
    if any(a.startswith("--query-gpu=") for a in args):
        return query(args, config)
    if args[:2] == ["topo", "-m"]:
        return topology(config)
    if args[:1] in (["-L"], ["--list-gpus"]):
        for gpu in config["gpus"]:
            print(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
            for number, (profile, uuid) in enumerate(gpu.get("migs", [])):
                print(f"  MIG {profile:<13} Device {number:>2}: (UUID: {uuid})")
        return 0
    print(HEADER.format(date=time.strftime("%a %b %d %H:%M:%S %Y"), driver=config["driver"], cuda=config["cuda"]))
    return 0


def gpu(index: int, *, mig: bool = False, name: str = "NVIDIA A100-SXM4-80GB", **readings: Any) -> dict[str, Any]:
    """One GPU's configuration: its identity and the readings it reports every time; ``migs``:
    its MIG devices as ``[profile, UUID]`` pairs (for ``-L``)."""
    return {
        "index": index, "uuid": f"GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c{index:02d}", "name": name,
        "pci": f"00000000:{0x07 + index:02X}:00.0", "util": 87, "mem_util": 41, "used": 61234, "total": 81920,
        "power": 312.45, "temp": 61, "sm_clock": 1410, "mig": mig, **readings,
    }  # fmt: skip


def install(directory: Path, gpus: list[dict[str, Any]], **config: Any) -> Path:
    """``directory/nvidia-smi`` answering for ``gpus``; ``config``: ``driver``, ``cuda``, ``link``
    (the topology label between any two GPUs), ``not_loaded``, ``stop_after`` (lines of -lms)."""
    directory.mkdir(parents=True, exist_ok=True)
    settings = {"driver": "550.54.15", "cuda": "12.4", "link": "NV12", **config, "gpus": gpus}
    (directory / "fake-nvidia-smi.json").write_text(json.dumps(settings))
    script = directory / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "{directory / "fake-nvidia-smi.json"}" "$@"\n'
    )
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1], sys.argv[2:]))
    except BrokenPipeError:
        sys.exit(0)

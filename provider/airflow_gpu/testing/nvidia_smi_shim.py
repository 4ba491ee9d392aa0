"""The emulated ``nvidia-smi`` (see ``airflow_gpu.testing.gpus``); standard library only.

``airflow_gpu.testing.gpus.install`` copies this module, compiled, beside an ``nvidia-smi`` script
that runs ``run`` with the devices it serves. It answers in nvidia-smi's formats:
``--query-gpu=<fields> --format=csv[,noheader][,nounits] [-lms=N | -l N] [-i | --id=IDS]``, ``topo
-m``, ``-L``, ``--version`` and the plain status header. ``--id`` takes a comma-separated list of
indices, UUIDs or PCI bus ids, as nvidia-smi does; one that names no device is nvidia-smi's "No
devices were found" (exit code 6). Readings follow the processes of the caller's session (the
container).

A profiler starts it several times per task and a sampling loop reads ``/proc`` at every line, on
machines running hundreds of processes: it imports only modules Python's start-up has already
loaded (no ``json``, ``pathlib``, ``typing`` or ``datetime``: each cost more than the start itself),
and reads ``/proc`` with ``os`` calls.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing's import costs more than the rest of a call
if TYPE_CHECKING:
    from typing import Any

    Device = dict[str, Any]

DRIVER, CUDA = "570.133.20", "12.8"
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
UNITS = {
    "utilization.gpu": " %", "utilization.memory": " %", "memory.used": " MiB", "memory.total": " MiB",
    "memory.free": " MiB", "power.draw": " W", "power.limit": " W", "clocks.sm": " MHz",
}  # fmt: skip


def session_usage() -> tuple[float, float]:
    """(CPU seconds, resident MiB) of the other processes in the caller's session: the container's (a
    profiler may start nvidia-smi in a session of its own)."""
    me, session = str(os.getpid()), os.getsid(os.getppid())
    ticks = pages = 0
    for name in os.listdir("/proc"):  # noqa: PTH208 - pathlib's import costs more than a call's work
        if not name.isdigit() or name == me:
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[3]) != session:
            continue
        ticks += int(fields[11]) + int(fields[12])
        pages += int(fields[21])
    return ticks / TICKS, pages * PAGE / 2**20


#: The shortest window a reading covers. CPU time comes in clock ticks (10 ms): over the millisecond
#: between start-up and the first reading, one tick would read as ten busy cores. The driver, too,
#: reports utilisation over its own sample period, and nvidia-smi takes a while to answer.
MIN_WINDOW_SECONDS = 0.1


class Readings:
    """Utilisation from the CPU time spent between two readings."""

    def __init__(self, devices: list[Device]) -> None:
        self.devices = devices
        self.last = (time.monotonic(), session_usage()[0])

    def take(self) -> list[tuple[Device, float, float, float]]:
        short = MIN_WINDOW_SECONDS - (time.monotonic() - self.last[0])
        if short > 0:
            time.sleep(short)
        now = time.monotonic()
        cpu, rss = session_usage()
        elapsed = max(now - self.last[0], 1e-3)
        busy = max(0.0, (cpu - self.last[1]) / elapsed * 100)
        self.last = (now, cpu)
        rows = []
        for device in self.devices:
            util = min(100.0, max(0.0, busy - 100 * device["index"]))
            used = min(float(device["memory_mib"]), rss if util > 0 else 0.0) + 3.0
            power = 0.1 * device["power_limit_w"] + 0.9 * device["power_limit_w"] * util / 100
            rows.append((device, util, used, power))
        return rows


def timestamp() -> str:
    """The local time as nvidia-smi's ``timestamp`` prints it: ``2026/11/23 14:50:01.123``."""
    now = time.time()
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def value(field: str, device: Device, util: float, used: float, power: float) -> Any:
    mig = device.get("mig")
    values = {
        "timestamp": timestamp(),
        "index": device["index"],
        "uuid": device["uuid"],
        "name": device["name"],
        "driver_version": DRIVER,
        "pci.bus_id": f"00000000:{0x10 + device['index']:02X}:00.0",
        "count": None,
        "utilization.gpu": "[N/A]" if mig else round(util),
        "utilization.memory": "[N/A]" if mig else round(util * 0.6),
        "memory.used": round(used),
        "memory.total": device["memory_mib"],
        "memory.free": device["memory_mib"] - round(used),
        "power.draw": f"{power:.2f}",
        "power.limit": f"{device['power_limit_w']:.2f}",
        "temperature.gpu": round(32 + util * 0.4),
        "clocks.sm": 1410 if util > 0 else 210,
        "mig.mode.current": "Enabled" if mig else "Disabled",
    }
    if field not in values:
        raise KeyError(field)
    return values[field]


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def chosen(args: list[str], devices: list[Device]) -> list[Device] | None:
    """The devices ``-i``/``--id`` names (all without it); None when an id names none."""
    ids = option(args, "--id") or option(args, "-i")
    if ids is None:
        return devices
    wanted = {w.strip() for w in ids.split(",")}
    found = [d for d in devices if {str(d["index"]), d["uuid"], f"00000000:{0x10 + d['index']:02X}:00.0"} & wanted]
    return found if len(found) == len(wanted) else None


def query(args: list[str], devices: list[Device]) -> int:
    fields = [f.strip() for f in (option(args, "--query-gpu") or "").split(",") if f.strip()]
    fmt = (option(args, "--format") or "csv").split(",")
    ms = option(args, "-lms")
    seconds = option(args, "-l") or option(args, "--loop")
    interval = int(ms) / 1000 if ms else (float(seconds) if seconds else None)
    try:
        for field in fields:
            value(field, devices[0] if devices else {"index": 0}, 0, 0, 0)
    except KeyError as error:
        print(f'Field "{error.args[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    if "noheader" not in fmt:
        print(", ".join(f + (f" [{UNITS[f].strip()}]" if f in UNITS else "") for f in fields))
    readings = Readings(devices)
    while True:
        for device, util, used, power in readings.take():
            cells = []
            for field in fields:
                cell = value(field, device, util, used, power)
                if field == "count":
                    cell = len(devices)
                unit = "" if "nounits" in fmt or str(cell).startswith("[") else UNITS.get(field, "")
                cells.append(f"{cell}{unit}")
            print(", ".join(str(c) for c in cells))
        sys.stdout.flush()
        if interval is None:
            return 0
        time.sleep(interval)


def topology(devices: list[Device]) -> int:
    names = [f"GPU{d['index']}" for d in devices]
    print("\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    for a in devices:
        cells = [" X " if a is b else ("NV18" if a.get("nvlink") else "PIX") for b in devices]
        print(f"GPU{a['index']}\t" + "\t".join(cells) + "\t0-7\t0\t\tN/A")
    print("\nLegend:\n\n  X    = Self")
    print("  SYS  = Connection traversing PCIe as well as the SMP interconnect")
    print("  PIX  = Connection traversing at most a single PCIe bridge")
    print("  NV#  = Connection traversing a bonded set of # NVLinks")
    return 0


def header(devices: list[Device]) -> int:
    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print("+-----------------------------------------------------------------------------------------+")
    print(f"| NVIDIA-SMI {DRIVER:<18} Driver Version: {DRIVER:<14} CUDA Version: {CUDA:<8}|")
    print("+-----------------------------------------------------------------------------------------+")
    for device in devices:
        print(f"|   {device['index']}  {device['name']:<40}   |")
    return 0


def main(args: list[str], devices: list[Device]) -> int:
    if not devices:
        print("No devices were found")
        return 6
    if args[:1] == ["topo"] and "-m" in args:
        return topology(devices)
    if args[:1] in (["-L"], ["--list-gpus"]):
        for device in devices:
            print(f"GPU {device['index']}: {device['name']} (UUID: {device['uuid']})")
        return 0
    if args[:1] == ["--version"]:
        print(f"NVIDIA-SMI version  : {DRIVER}\nNVML version        : {DRIVER.rsplit('.', 1)[0]}")
        print(f"DRIVER version      : {DRIVER}\nCUDA Version        : {CUDA}")
        return 0
    if option(args, "--query-gpu"):
        named = chosen(args, devices)
        if named is None:
            print("No devices were found")
            return 6
        return query(args, named)
    return header(devices)


def run(devices: list[Device]) -> None:
    """The ``nvidia-smi`` script's body: answer ``sys.argv`` for ``devices`` and exit."""
    try:
        sys.exit(main(sys.argv[1:], devices))
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)

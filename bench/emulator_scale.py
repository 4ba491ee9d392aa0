"""10,000 pods on one machine: the Kubernetes emulator in scale mode, next to plain objects.

The emulator runs in its own process with the scale cluster (``airflow-gpu emulate kubernetes
--scale NODES``); the unmodified ``kubernetes`` client creates N one-GPU pods with simulated
containers one after another, and the benchmark times them to all ``Running`` (scheduled on the
fleet's GPU nodes, started by the kubelet), a LIST of them, and the emulator's CPU and memory. The
baseline, in the same run, is N ConfigMaps through the same client: what the API and the store cost
alone, without scheduling, a kubelet or events.

    python bench/emulator_scale.py                 # 10,000 pods on 2,500 nodes
    python bench/emulator_scale.py --pods 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import fleet


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args()
    from kubernetes import client, config

    folder = Path(tempfile.mkdtemp(prefix="bench-emulator-scale-"))
    nodes = fleet.nodes_for(args.pods)
    emulator, kubeconfig, _ = fleet.start_emulator(folder, nodes)
    try:
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        rss_before = process_rss_mib(emulator.pid)
        cpu, started = process_cpu_seconds(emulator.pid), time.monotonic()
        for i in range(args.pods):
            body = {"metadata": {"name": f"settings-{i}"}, "data": {"shard": str(i)}}
            core.create_namespaced_config_map("default", body, _preload_content=False).drain_conn()
        maps = {"seconds": time.monotonic() - started, "cpu": process_cpu_seconds(emulator.pid) - cpu}
        cpu, started = process_cpu_seconds(emulator.pid), time.monotonic()
        fleet.create_pods(kubeconfig, [f"shard-{i}" for i in range(args.pods)])
        pods = {"seconds": time.monotonic() - started, "cpu": process_cpu_seconds(emulator.pid) - cpu}
        started = time.monotonic()
        listed = json.loads(core.list_namespaced_pod("default", _preload_content=False).data)["items"]
        list_seconds = time.monotonic() - started
        rss = process_rss_mib(emulator.pid)
    finally:
        emulator.terminate()
        emulator.wait(60)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nMachine: {fleet.machine()}. Emulator in its own process, scale cluster of {nodes:,} nodes;")
    print("objects created one after another by the unmodified kubernetes client.\n")
    print(f"{'objects':<40}{'count':>8}{'seconds':>9}{'per second':>12}{'emulator CPU ms each':>22}")
    for label, row in (("ConfigMaps (baseline: API and store)", maps), ("simulated GPU pods, to all Running", pods)):
        print(
            f"{label:<40}{args.pods:>8,}{row['seconds']:>9.1f}{args.pods / row['seconds']:>12.0f}"
            f"{1000 * row['cpu'] / args.pods:>22.2f}"
        )
    print(f"\nLIST of {len(listed):,} pods: {list_seconds:.2f} s.")
    print(f"Emulator RSS {rss:.0f} MiB with all of them ({rss_before:.0f} MiB with the nodes only).")


if __name__ == "__main__":
    main()

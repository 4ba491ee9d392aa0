"""How many pods per second the Kubernetes emulator runs to completion on this machine.

Baseline, measured in the same run: starting the same command as plain subprocesses, which is the
floor any emulator that really runs containers as processes can reach. The difference is what the
API, the scheduler, the watches and the status bookkeeping cost.

    python bench/emulator_throughput.py [--pods 200] [--parallel 20]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, config

from airflow_gpu.testing.kubernetes import KubernetesEmulator

COMMAND = ["true"]


def _baseline(count: int, parallel: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: subprocess.run(COMMAND, check=True), range(count)))
    return count / (time.perf_counter() - start)


def _emulator(count: int, parallel: int) -> float:
    with KubernetesEmulator() as emulator, tempfile.TemporaryDirectory() as scratch:
        api = client.CoreV1Api(config.new_client_from_config(str(emulator.write_kubeconfig(Path(scratch) / "kc"))))

        def run_pod(index: int) -> None:
            name = f"bench-{index}"
            manifest = {
                "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "command": COMMAND}]},
            }
            api.create_namespaced_pod("default", manifest)
            while api.read_namespaced_pod(name, "default").status.phase not in ("Succeeded", "Failed"):
                time.sleep(0.01)

        start = time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(run_pod, range(count)))
        return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=20)
    args = parser.parse_args()
    baseline = _baseline(args.pods, args.parallel)
    emulated = _emulator(args.pods, args.parallel)
    print(f"{args.pods} pods running {' '.join(COMMAND)!r}, {args.parallel} at a time")
    print(f"  Kubernetes emulator (API + scheduler + kubelet)  {emulated:8.1f} pods/s")
    print(f"  baseline: plain subprocesses                     {baseline:8.1f} runs/s")
    print(f"  emulator overhead per pod                        {1000 / emulated - 1000 / baseline:8.1f} ms")


if __name__ == "__main__":
    main()

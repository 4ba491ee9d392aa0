"""The demo: the fan-out example DAG through a real Airflow against the local Kubernetes emulator.

``make demo`` runs this. It starts the emulator (two spot 8x H100 nodes, an on-demand 4x L4
node, a CPU node), a real Airflow (api-server, scheduler, dag-processor, triggerer on SQLite)
whose ``kubernetes_default`` connection points at it, triggers ``gpu_fanout`` through the REST API
as the UI does, reclaims one shard's spot node while it runs, shows the task states as they
change, and prints each shard's result and interruptions. It then keeps running for you to look
around in the UI until Ctrl-C; with ``DEMO_ONCE=1`` it exits after the run, non-zero if it failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

DAG_ID = "gpu_fanout"
PASSWORD = "airflow-gpu-demo"


def inject_preemption(emulator: KubernetesEmulator, done: threading.Event, log: Any) -> None:
    """Reclaim the spot node of the first shard that has been running for a second."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
    seen: dict[str, float] = {}
    while not done.is_set():
        for pod in api.list_namespaced_pod("default", label_selector="task_id=score_shard").items:
            if pod.status.phase != "Running":
                continue
            first = seen.setdefault(pod.metadata.name, time.monotonic())
            if time.monotonic() - first >= 1.0:
                log(f"  !! spot reclaim: node {pod.spec.node_name} takes back pod {pod.metadata.name}")
                emulator.preempt(pod.metadata.name)
                return
        time.sleep(0.2)


def watch_run(stack: AirflowStack, run_id: str, log: Any, timeout: float = 900) -> str:
    start = time.monotonic()
    last: dict[tuple[str, int], str | None] = {}
    while time.monotonic() - start < timeout:
        for ti in stack.task_instances(DAG_ID, run_id):
            key = (ti["task_id"], ti["map_index"])
            if last.get(key) != ti["state"]:
                last[key] = ti["state"]
                label = ti.get("rendered_map_index") or f"map index {ti['map_index']}"
                name = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']} [{label}]"
                log(f"  {time.monotonic() - start:6.1f}s  {name:<32} {ti['state'] or 'waiting'}")
        state = stack.run_state(DAG_ID, run_id)
        if state in ("success", "failed"):
            return state
        time.sleep(1)
    return "timed out"


def report(stack: AirflowStack, run_id: str, log: Any) -> None:
    log("\nResults:")
    for ti in sorted(stack.task_instances(DAG_ID, run_id), key=lambda t: (t["task_id"], t["map_index"])):
        if ti["task_id"] != "score_shard":
            continue
        result = stack.xcom(DAG_ID, run_id, "score_shard", map_index=ti["map_index"])
        used = stack.xcom(DAG_ID, run_id, "score_shard", "gpu_accelerator", ti["map_index"]) or {}
        interruptions = stack.xcom(DAG_ID, run_id, "score_shard", "gpu_interruptions", ti["map_index"]) or []
        log(
            f"  {ti.get('rendered_map_index') or ti['map_index']:<8} {ti['state']:<8} on {used.get('accelerator')}"
            f"/{used.get('capacity')}  result {json.dumps(result)}"
        )
        for item in interruptions:
            log(f"           interrupted: {item['reason']} on {item['pod']} -> {item['next']}")
    log(f"  reduce   {json.dumps(stack.xcom(DAG_ID, run_id, 'reduce'))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workdir", default=".demo", help="where the Airflow home and kubeconfig go")
    parser.add_argument("--port", type=int, default=0, help="API server port (0: a free one)")
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--once", action="store_true", default=os.environ.get("DEMO_ONCE") == "1")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, flush=True)

    workdir = Path(args.workdir).resolve()
    dags = Path(__file__).resolve().parents[3] / "dags"
    if not (dags / "gpu_fanout.py").exists():
        dags = Path.cwd() / "dags"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with KubernetesEmulator("demo") as emulator:
        emulator.write_kubeconfig(workdir / "kubeconfig")
        log(f"Kubernetes emulator at {emulator.url} (kubeconfig {emulator.kubeconfig_path})")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(emulator.kubeconfig_path)}}
        stack = AirflowStack(
            workdir / "airflow-home",
            dags,
            port=args.port or None,
            password=PASSWORD,
            extra_env={"AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection)},
        )
        log("Starting Airflow (api-server, scheduler, dag-processor, triggerer)...")
        with stack:
            log(f"Airflow UI: {stack.url}  (login: admin / {PASSWORD})")
            stack.wait_for_dag(DAG_ID)
            run_id = stack.trigger(DAG_ID, {"shards": args.shards})
            log(f"Triggered {DAG_ID} run {run_id} with {args.shards} shards; one spot node will be reclaimed.\n")
            done = threading.Event()
            injector = threading.Thread(target=inject_preemption, args=(emulator, done, log), daemon=True)
            injector.start()
            state = watch_run(stack, run_id, log)
            done.set()
            report(stack, run_id, log)
            log(f"\nRun {state}. Airflow UI: {stack.url}/dags/{DAG_ID}  (login: admin / {PASSWORD})")
            if args.once:
                return 0 if state == "success" else 1
            log("Everything keeps running for you to explore; Ctrl-C stops it all.")
            try:
                while not stop.wait(1):
                    pass
            except KeyboardInterrupt:
                pass
            log("Stopping Airflow and the emulator...")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

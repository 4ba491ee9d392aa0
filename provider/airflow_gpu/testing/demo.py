"""The demo: the example DAGs through a real Airflow against the local Kubernetes and Batch emulators.

``make demo`` runs this. It starts the Kubernetes emulator (two spot 8x H100 nodes, an on-demand
4x L4 node, a CPU node) and the AWS Batch emulator (queues ``gpu-spot`` and ``gpu-on-demand``), a
real Airflow (api-server, scheduler, dag-processor, triggerer on SQLite) whose
``kubernetes_default`` and ``aws_default`` connections point at them, triggers ``gpu_fanout`` and
``gpu_batch_train`` through the REST API as the UI does, reclaims one shard's spot node and the
training job's spot host while they run, shows the task states as they change, and prints each
task's result and interruptions. Then ``gpu_profile_showcase`` runs once on each backend (two
profiled shards each) and the demo prints the GPU Profile report of each run beside the UI URL and
the login, while ``accelerate_training`` trains a tiny model with ``accelerate launch`` on the
worker, on two Kubernetes machines and on two Batch nodes, and the demo prints each loss curve.
It then keeps running for you to look around in the UI until Ctrl-C; with ``DEMO_ONCE=1`` it exits
after the runs, non-zero if one failed.
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
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

DAG_ID = "gpu_fanout"
BATCH_DAG_ID = "gpu_batch_train"
PROFILE_DAG_ID = "gpu_profile_showcase"
TRAINING_DAG_ID = "accelerate_training"
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


def inject_reclaim(emulator: BatchEmulator, done: threading.Event, log: Any) -> None:
    """Reclaim the spot host of the training job once it has run for two seconds."""
    seen: dict[str, float] = {}
    while not done.is_set():
        for job in emulator.jobs():
            if job.status != "RUNNING" or job.job_queue.name != "gpu-spot":
                continue
            first = seen.setdefault(job.job_id, time.monotonic())
            if time.monotonic() - first >= 2.0:
                host = f"{job.instance_id} ({job.instance_type})"
                log(f"  !! spot reclaim: EC2 takes back {host}, the host of job {job.job_name}")
                emulator.reclaim(job.job_id)
                return
        time.sleep(0.2)


def watch_run(stack: AirflowStack, run_id: str, log: Any, timeout: float = 900, dag_id: str = DAG_ID) -> str:
    start = time.monotonic()
    last: dict[tuple[str, int], str | None] = {}
    while time.monotonic() - start < timeout:
        for ti in stack.task_instances(dag_id, run_id):
            key = (ti["task_id"], ti["map_index"])
            if last.get(key) != ti["state"]:
                last[key] = ti["state"]
                label = ti.get("rendered_map_index") or f"map index {ti['map_index']}"
                name = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']} [{label}]"
                log(f"  {time.monotonic() - start:6.1f}s  {dag_id}: {name:<32} {ti['state'] or 'waiting'}")
        state = stack.run_state(dag_id, run_id)
        if state in ("success", "failed"):
            return state
        time.sleep(1)
    return "timed out"


def report_batch(stack: AirflowStack, run_id: str, log: Any) -> None:
    used = stack.xcom(BATCH_DAG_ID, run_id, "train", "gpu_accelerator") or {}
    log(f"\n{BATCH_DAG_ID} on {used.get('accelerator')}/{used.get('capacity')} (queue {used.get('location')}):")
    log(f"  train    result {json.dumps(stack.xcom(BATCH_DAG_ID, run_id, 'train'))}")
    for item in stack.xcom(BATCH_DAG_ID, run_id, "train", "gpu_interruptions") or []:
        where = f"job {item['workload']}, attempt {item['attempt']}"
        log(f"           interrupted: {item['reason']} ({where}): {item['message']}")
    log(f"  evaluate {json.dumps(stack.xcom(BATCH_DAG_ID, run_id, 'evaluate'))}")


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
            log(f"           interrupted: {item['reason']} on {item['workload']} -> {item['next']}")
    log(f"  reduce   {json.dumps(stack.xcom(DAG_ID, run_id, 'reduce'))}")


def start_training(stack: AirflowStack, workdir: Path, log: Any) -> str:
    """``accelerate_training`` on the worker, Kubernetes and Batch (no CUDA there: gloo on CPU)."""
    stack.wait_for_dag(TRAINING_DAG_ID)
    conf = {"emulated": True, "epochs": 4, "checkpoint_root": str(workdir / "checkpoints")}
    run_id = stack.trigger(TRAINING_DAG_ID, conf)
    log(f"\nTriggered {TRAINING_DAG_ID}: accelerate launch of a tiny model, 2 processes each on the worker, "
        "2 Kubernetes machines (an Indexed Job) and 2 Batch nodes (a multi-node parallel job).")  # fmt: skip
    return run_id


def finish_training(stack: AirflowStack, run_id: str, log: Any) -> str:
    state = watch_run(stack, run_id, log, dag_id=TRAINING_DAG_ID)
    log("\nTraining:")
    for task in ("train_on_worker", "train_on_kubernetes", "train_on_batch"):
        result = stack.xcom(TRAINING_DAG_ID, run_id, task) or {}
        losses = result.get("losses") or [None]
        log(
            f"  {task:<20} ranks {result.get('ranks')} on machines {result.get('machines')}: "
            f"loss {losses[0]} -> {losses[-1]}"
        )
    return state


def run_showcase(stack: AirflowStack, log: Any) -> str:
    """The profiling showcase on each backend at once; prints each run's report. The runs' state."""
    from urllib.parse import quote

    stack.wait_for_dag(PROFILE_DAG_ID)
    runs = {
        backend: stack.trigger(PROFILE_DAG_ID, {"backend": backend, "accelerator": accelerator, "gpus": 2})
        for backend, accelerator in (("kubernetes", "L4"), ("batch", "A10G"))
    }
    log(f"\nTriggered {PROFILE_DAG_ID} on Kubernetes (2x L4 per shard) and AWS Batch (2x A10G per shard).")
    states = [watch_run(stack, run_id, log, dag_id=PROFILE_DAG_ID) for run_id in runs.values()]
    log("\nGPU profiles:")
    for backend, run_id in runs.items():
        task = f"shard_on_{backend}"
        for index in (0, 1):
            profile = stack.xcom(PROFILE_DAG_ID, run_id, task, "gpu_profile", index) or {}
            advice = "; ".join(a["message"] for a in profile.get("advice") or []) or "none"
            cost = profile.get("cost") or {}
            log(
                f"  {backend:<10} shard {index}: {len(profile.get('gpus') or [])} GPU(s), mean utilisation "
                f"{profile.get('util_mean') or 0:.0f}%, about ${cost.get('usd', 0):.2f}; advice: {advice}"
            )
        log(f"  report: {stack.url}/gpu-profile/dags/{PROFILE_DAG_ID}/runs/{quote(run_id, safe='')}")
    return "success" if all(s == "success" for s in states) else "failed"


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
    with KubernetesEmulator("demo") as emulator, BatchEmulator() as batch:
        emulator.write_kubeconfig(workdir / "kubeconfig")
        log(f"Kubernetes emulator at {emulator.url} (kubeconfig {emulator.kubeconfig_path})")
        log(f"AWS Batch emulator at {batch.endpoint_url} (queues gpu-spot, gpu-on-demand)")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(emulator.kubeconfig_path)}}
        stack = AirflowStack(
            workdir / "airflow-home",
            dags,
            port=args.port or None,
            password=PASSWORD,
            extra_env={
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
                "AIRFLOW_CONN_AWS_DEFAULT": batch.airflow_connection_uri(),
            },
        )
        log("Starting Airflow (api-server, scheduler, dag-processor, triggerer)...")
        with stack:
            log(f"Airflow UI: {stack.url}  (login: admin / {PASSWORD})")
            stack.wait_for_dag(DAG_ID)
            stack.wait_for_dag(BATCH_DAG_ID)
            run_id = stack.trigger(DAG_ID, {"shards": args.shards})
            log(f"Triggered {DAG_ID} run {run_id} with {args.shards} shards; one spot node will be reclaimed.")
            batch_run = stack.trigger(BATCH_DAG_ID, {"epochs": 20})
            log(f"Triggered {BATCH_DAG_ID} run {batch_run}; its spot host will be reclaimed once.\n")
            done = threading.Event()
            for target, emulated in ((inject_preemption, emulator), (inject_reclaim, batch)):
                threading.Thread(target=target, args=(emulated, done, log), daemon=True).start()
            batch_state: list[str] = []
            watcher = threading.Thread(
                target=lambda: batch_state.append(watch_run(stack, batch_run, log, dag_id=BATCH_DAG_ID)), daemon=True
            )
            watcher.start()
            state = watch_run(stack, run_id, log)
            watcher.join(timeout=900)
            done.set()
            report(stack, run_id, log)
            report_batch(stack, batch_run, log)
            state = state if state != "success" else (batch_state or ["timed out"])[0]
            training = start_training(stack, workdir, log)
            profiled = run_showcase(stack, log)
            trained = finish_training(stack, training, log)
            state = next((s for s in (state, profiled, trained) if s != "success"), "success")
            log(f"\nRuns {state}. Airflow UI: {stack.url}/dags  (login: admin / {PASSWORD})")
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

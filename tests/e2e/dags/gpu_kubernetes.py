"""GPUKubernetesOperator scenarios run by tests/e2e/test_gpu_kubernetes_operator.py against the emulator.

The test picks the scenario with GPU_SCENARIO (and GPU_DEFERRABLE=1 for the deferrable mode) and
points the operator at the emulator with KUBECONFIG; RESULT_FILE receives what the downstream task
read from XCom.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

SCENARIO = os.environ.get("GPU_SCENARIO", "single")
KUBECONFIG = os.environ.get("KUBECONFIG")
CHECKPOINT = os.environ.get("CHECKPOINT_FILE", "/tmp/airflow-gpu-checkpoint")

# A training loop that checkpoints on SIGTERM and resumes from the checkpoint on the next pod.
TRAIN = f"""
import json, os, signal, sys, time
path = {CHECKPOINT!r}
state = json.load(open(path)) if os.path.exists(path) else {{"step": 0, "total": 0}}
print("resuming at step", state["step"], "attempt", os.environ["AIRFLOW_GPU_ATTEMPT"], flush=True)
def stop(*_):
    json.dump(state, open(path, "w"))
    notice = os.environ["AIRFLOW_GPU_SPOT_NOTICE_FILE"]
    print("SIGTERM at step", state["step"], "notice", os.path.exists(notice), flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while state["step"] < 30:
    state["step"] += 1
    state["total"] += state["step"]
    time.sleep(0.1)
print("result", state["total"], flush=True)
"""

COMMON = {
    "config_file": KUBECONFIG, "in_cluster": False, "namespace": "default", "get_logs": True, "poll_interval": 1,
    "deferrable": os.environ.get("GPU_DEFERRABLE") == "1",
}  # fmt: skip

with DAG("gpu_kubernetes", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    if SCENARIO == "single":
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator="L4", image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            cmds=["sh", "-c", "echo accelerator=$AIRFLOW_GPU_ACCELERATOR capacity=$AIRFLOW_GPU_CAPACITY"], **COMMON,
        )  # fmt: skip
    elif SCENARIO == "preempt":
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator="H100:8", capacity="spot",
            spot=SpotPolicy(max_interruptions=3, grace_period_seconds=5), cmds=[sys.executable, "-c", TRAIN], **COMMON,
        )  # fmt: skip
    elif SCENARIO == "vanish":  # the test deletes the first pod while it is still Pending
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator="H100:8", capacity="spot",
            cmds=["sh", "-c", "echo ran attempt $AIRFLOW_GPU_ATTEMPT"], **COMMON,
        )  # fmt: skip
    elif SCENARIO == "fallback":
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator=["H100:8", "L4:4"], capacity="spot",
            spot=SpotPolicy(max_interruptions=0, capacity_timeout=3), cmds=[sys.executable, "-c", TRAIN], **COMMON,
        )  # fmt: skip
    elif SCENARIO == "unschedulable":
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator=["B200:8", "L4:2"], capacity="on-demand",
            spot=SpotPolicy(capacity_timeout=3), cmds=["sh", "-c", "echo ran on $AIRFLOW_GPU_ACCELERATOR"], **COMMON,
        )  # fmt: skip
    elif SCENARIO == "app-failure":
        train = GPUKubernetesOperator(
            task_id="train", name="train", accelerator="L4", cmds=["sh", "-c", "echo boom; exit 7"], retries=2,
            **COMMON,
        )  # fmt: skip

    @task(trigger_rule="all_done")
    def report(ti=None) -> None:  # type: ignore[no-untyped-def]
        result = {
            "interruptions": ti.xcom_pull(task_ids="train", key="gpu_interruptions"),
            "accelerator": ti.xcom_pull(task_ids="train", key="gpu_accelerator"),
        }
        Path(os.environ["RESULT_FILE"]).write_text(json.dumps(result))

    train >> report()

"""GPUBatchOperator scenarios run by tests/e2e/test_gpu_batch_operator.py against the Batch emulator.

The test points ``aws_default`` at the emulator, picks the scenario with GPU_SCENARIO (and
GPU_DEFERRABLE=1 for the deferrable mode); RESULT_FILE receives what the downstream task read
from XCom. The training loop checkpoints on SIGTERM and resumes from the checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.spot.policy import SpotPolicy

SCENARIO = os.environ.get("GPU_SCENARIO", "single")
CHECKPOINT = os.environ.get("CHECKPOINT_FILE", "/tmp/airflow-gpu-batch-checkpoint")
TRAIN = f"""
import json, os, signal, sys, time
path = {CHECKPOINT!r}
state = json.load(open(path)) if os.path.exists(path) else {{"step": 0, "total": 0}}
print("resuming at step", state["step"], "batch attempt", os.environ["AWS_BATCH_JOB_ATTEMPT"],
      "on", os.environ["AWS_BATCH_JQ_NAME"], os.environ["AIRFLOW_GPU_ACCELERATOR"], flush=True)
def stop(*_):
    json.dump(state, open(path, "w"))
    print("SIGTERM at step", state["step"], flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while state["step"] < 30:
    state["step"] += 1
    state["total"] += state["step"]
    time.sleep(0.1)
print("::airflow-gpu-result::" + json.dumps({{"total": state["total"]}}), flush=True)
"""
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
COMMON = {"poll_interval": 1, "deferrable": os.environ.get("GPU_DEFERRABLE") == "1", "awslogs_fetch_interval": 1}

with DAG("gpu_batch", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    if SCENARIO == "single":
        train = GPUBatchOperator(
            task_id="train", accelerator="A10G", command=[sys.executable, "-c", TRAIN], job_queues=QUEUES, **COMMON
        )
    elif SCENARIO == "reclaim":  # Batch retries the reclaim itself, within the budget
        train = GPUBatchOperator(
            task_id="train", accelerator="H100:8", command=[sys.executable, "-c", TRAIN], job_queues=QUEUES,
            spot=SpotPolicy(max_interruptions=3), **COMMON,
        )  # fmt: skip
    elif SCENARIO == "fallback":  # past the budget: the on-demand queue
        train = GPUBatchOperator(
            task_id="train", accelerator="H100:8", command=[sys.executable, "-c", TRAIN], job_queues=QUEUES,
            spot=SpotPolicy(max_interruptions=1), **COMMON,
        )  # fmt: skip
    elif SCENARIO == "capacity":  # the test stalls the spot environment
        train = GPUBatchOperator(
            task_id="train", accelerator="L4", command=["sh", "-c", "echo ran on $AWS_BATCH_JQ_NAME"],
            job_queues=QUEUES, spot=SpotPolicy(capacity_timeout=3), **COMMON,
        )  # fmt: skip
    elif SCENARIO == "app-failure":
        train = GPUBatchOperator(
            task_id="train", accelerator="A10G", command=["sh", "-c", "echo boom; exit 7"], job_queue="gpu-on-demand",
            retries=2, **COMMON,
        )  # fmt: skip
    elif SCENARIO == "no-queue":
        train = GPUBatchOperator(
            task_id="train", accelerator="B200:8", command=["true"], job_queues=QUEUES, retries=2, **COMMON
        )
    elif SCENARIO == "own-definition":  # the test registers team-trainer with its own retryStrategy
        train = GPUBatchOperator(
            task_id="train", accelerator="L4:2", job_definition="team-trainer", job_queue="gpu-on-demand", **COMMON
        )
    elif SCENARIO == "mapped":
        train = GPUBatchOperator.partial(
            task_id="train", accelerator="L4", job_queues=QUEUES, max_active_tis_per_dagrun=5, **COMMON
        ).expand(command=[["sh", "-c", f"echo '::airflow-gpu-result::{{\"shard\": {i}}}'"] for i in range(5)])

    @task(trigger_rule="all_done")
    def report(ti=None) -> None:  # type: ignore[no-untyped-def]
        def pull(key: str) -> object:
            if SCENARIO == "mapped":
                return [ti.xcom_pull(task_ids="train", key=key, map_indexes=i) for i in range(5)]
            return ti.xcom_pull(task_ids="train", key=key)

        keys = {"interruptions": "gpu_interruptions", "accelerator": "gpu_accelerator", "result": "return_value"}
        result = {name: pull(key) for name, key in {**keys, "job_id": "batch_job_id"}.items()}
        Path(os.environ["RESULT_FILE"]).write_text(json.dumps(result, default=list))

    train >> report()

"""GPUBatchOperator scenarios, one DAG each, run on the shared stack by
tests/e2e/test_gpu_batch_operator.py.

Each DAG talks to its own AWS Batch emulator through the connection ``aws_<dag_id>`` that the
test creates, so that scenarios run side by side without seeing each other's jobs, reclaims or
stalled compute environments. ``dag_run.conf["workdir"]`` is where the job keeps its checkpoint
and finds its release file.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.spot.policy import SpotPolicy

# A training loop that checkpoints on SIGTERM and resumes from the checkpoint on the next attempt.
# When the run's conf says "hold", each attempt stops after 3 steps until the test creates the
# release file: the test reclaims the host of a holding attempt (its lines are in the task log by
# then) and releases the attempt it wants to finish. No attempt's fate depends on timing.
TRAIN = """
import json, os, signal, sys, time
path, attempt = os.environ["CHECKPOINT_FILE"], os.environ["AWS_BATCH_JOB_ATTEMPT"]
state = json.load(open(path)) if os.path.exists(path) else {"step": 0, "total": 0}
print("resuming at step", state["step"], "batch attempt", attempt,
      "on", os.environ["AWS_BATCH_JQ_NAME"], os.environ["AIRFLOW_GPU_ACCELERATOR"], flush=True)
def stop(*_):
    json.dump(state, open(path, "w"))
    # os.write, not print: the signal may land inside the loop's own print ("reentrant call")
    os.write(1, f"SIGTERM at step {state['step']}\\n".encode())
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
first = state["step"]
while state["step"] < 30:
    state["step"] += 1
    state["total"] += state["step"]
    print("step", state["step"], flush=True)
    if os.environ["HOLD"] == "True" and state["step"] == first + 3:
        print("attempt", attempt, "holding at step", state["step"], flush=True)
        while not os.path.exists(os.environ["RELEASE_FILE"]):
            time.sleep(0.05)  # the workload polls for the test's release file: an observable state
    time.sleep(0.1)  # the step's work: the workload runs for a while, the test waits on its log lines
print("::airflow-gpu-result::" + json.dumps({"total": state["total"]}), flush=True)
"""
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRAINING = {"command": [sys.executable, "-c", TRAIN], "job_queues": QUEUES}


def common(dag_id: str, deferrable: bool) -> dict[str, Any]:
    return {
        "task_id": "train", "aws_conn_id": f"aws_{dag_id}", "poll_interval": 1, "awslogs_fetch_interval": 1,
        "deferrable": deferrable, "environment": {
            "CHECKPOINT_FILE": "{{ dag_run.conf['workdir'] }}/checkpoint.json",
            "RELEASE_FILE": "{{ dag_run.conf['workdir'] }}/release",
            "HOLD": "{{ dag_run.conf.get('hold', False) }}",
        },
        # A wrong retry shows as a second try within seconds, not as a run stuck for 5 minutes.
        "retry_delay": timedelta(seconds=1),
    }  # fmt: skip


def scenario(dag_id: str, deferrable: bool = False, max_active_runs: int = 16, **operator: Any) -> DAG:
    """One DAG with one GPU task ``train`` against the emulator of connection ``aws_<dag_id>``."""
    with DAG(
        dag_id, schedule=None, start_date=START, catchup=False, tags=["e2e-scenario"], max_active_runs=max_active_runs
    ) as dag:
        GPUBatchOperator(**common(dag_id, deferrable), **operator)
    return dag


def both_modes(dag_id: str, **operator: Any) -> None:
    scenario(dag_id, **operator)
    scenario(f"{dag_id}_deferrable", deferrable=True, **operator)


# Triggered twice, one run after the other: the second parse must find the same definition revision.
scenario("gpu_batch_single", accelerator="A10G", max_active_runs=1, **TRAINING)
scenario("gpu_batch_reclaim", accelerator="H100:8", spot=SpotPolicy(max_interruptions=3), **TRAINING)
both_modes("gpu_batch_fallback", accelerator="H100:8", spot=SpotPolicy(max_interruptions=1), **TRAINING)
both_modes(  # the test stalls the spot environment
    "gpu_batch_capacity", accelerator="L4", command=["sh", "-c", "echo ran on $AWS_BATCH_JQ_NAME"],
    job_queues=QUEUES, spot=SpotPolicy(capacity_timeout=3),
)  # fmt: skip
both_modes(
    "gpu_batch_app_failure", accelerator="A10G", command=["sh", "-c", "echo boom; exit 7"],
    job_queue="gpu-on-demand", retries=2,
)  # fmt: skip
both_modes(  # the test arms throttles, 5xx and dropped connections on every call the task makes
    "gpu_batch_transient", accelerator="A10G", job_queue="gpu-on-demand", retries=2,
    command=["sh", "-c", "echo working; echo '::airflow-gpu-result::{\"ok\": true}'"],
)  # fmt: skip
scenario("gpu_batch_no_queue", accelerator="B200:8", command=["true"], job_queues=QUEUES, retries=2)
# The test registers team-trainer with its own retryStrategy.
scenario("gpu_batch_own_definition", accelerator="L4:2", job_definition="team-trainer", job_queue="gpu-on-demand")

with DAG("gpu_batch_mapped", schedule=None, start_date=START, catchup=False, tags=["e2e-scenario"]):
    GPUBatchOperator.partial(
        **common("gpu_batch_mapped", False), accelerator="L4", job_queues=QUEUES, max_active_tis_per_dagrun=5
    ).expand(command=[["sh", "-c", f"echo '::airflow-gpu-result::{{\"shard\": {i}}}'"] for i in range(5)])

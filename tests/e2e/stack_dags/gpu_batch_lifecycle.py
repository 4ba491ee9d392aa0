"""Batch DAGs the stack end-to-end tests (tests/e2e/test_gpu_batch_lifecycle.py) drive through REST.

The job waits for the file named by ``dag_run.conf["release"]``, writes ``<release>.sigterm`` on
SIGTERM, and prints its Batch attempt as the task's result.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.batch import GPUBatchOperator

WAIT = (
    "trap 'touch \"$RELEASE.sigterm\"; exit 143' TERM; echo waiting; "
    'while [ ! -f "$RELEASE" ]; do sleep 0.2; done; '
    'echo "::airflow-gpu-result::{\\"batch_attempt\\": $AWS_BATCH_JOB_ATTEMPT, '
    '\\"gpu_attempt\\": $AIRFLOW_GPU_ATTEMPT}"'
)
# The stack runs these while the scenario runs hold its executor slots: first in line for a slot.
COMMON = {
    "priority_weight": 1000,
    "weight_rule": "absolute",
    "accelerator": "L4",
    "command": ["sh", "-c", WAIT],
    "environment": {"RELEASE": "{{ dag_run.conf['release'] }}"},
    "job_queue": "gpu-on-demand",
    "poll_interval": 1,
    "awslogs_fetch_interval": 1,
}
START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG("gpu_batch_on_kill", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on a Batch job."):
    GPUBatchOperator(task_id="train", **COMMON)

with DAG("gpu_batch_reattach", schedule=None, start_date=START, catchup=False, doc_md="A worker dies mid-job."):
    GPUBatchOperator(task_id="train", retries=1, retry_delay=timedelta(seconds=1), **COMMON)

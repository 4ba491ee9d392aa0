"""Scenario DAGs of tests/e2e/test_gpu_batch_lifecycle.py, each against a Batch emulator of its own
(connection ``aws_<dag_id>``).

The job waits for ``<dag_run.conf["workdir"]>/release``, writes ``release.sigterm`` there on
SIGTERM (``release.ready`` once that trap is set), and prints its Batch attempt as the task's result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.batch import GPUBatchOperator

WAIT = (
    'trap \'touch "$RELEASE.sigterm"; exit 143\' TERM; : > "$RELEASE.ready"; echo waiting; '
    'while [ ! -f "$RELEASE" ]; do sleep 0.2; done; '
    'echo "::airflow-gpu-result::{\\"batch_attempt\\": $AWS_BATCH_JOB_ATTEMPT, '
    '\\"gpu_attempt\\": $AIRFLOW_GPU_ATTEMPT}"'
)


def common(dag_id: str) -> dict[str, Any]:
    return {
        # These wait out a heartbeat timeout or a person's click while the other scenarios run:
        # first in line for an executor slot, so that the waiting starts early.
        "priority_weight": 1000,
        "weight_rule": "absolute",
        "accelerator": "L4",
        "command": ["sh", "-c", WAIT],
        "environment": {"RELEASE": "{{ dag_run.conf['workdir'] }}/release"},
        "job_queue": "gpu-on-demand",
        "aws_conn_id": f"aws_{dag_id}",
        "poll_interval": 1,
        "awslogs_fetch_interval": 1,
    }


START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG("gpu_batch_on_kill", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on a Batch job."):
    GPUBatchOperator(task_id="train", **common("gpu_batch_on_kill"))

with DAG("gpu_batch_reattach", schedule=None, start_date=START, catchup=False, doc_md="A worker dies mid-job."):
    GPUBatchOperator(task_id="train", retries=1, retry_delay=timedelta(seconds=1), **common("gpu_batch_reattach"))

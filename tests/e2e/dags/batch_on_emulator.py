"""The official BatchOperator, unmodified, against the AWS Batch emulator through ``aws_default``.

The test points AIRFLOW_CONN_AWS_DEFAULT at the emulator, registers the job definition
``gpu-smoke`` and sets BATCH_EXIT (the container's exit code) and BATCH_DEFERRABLE.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.sdk import DAG

# The hook sleeps 1..10 s between polls by default; its docstring suggests this for tests.
BatchClientHook.DEFAULT_DELAY_MIN, BatchClientHook.DEFAULT_DELAY_MAX = 0, 1

with DAG("batch_on_emulator", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    BatchOperator(
        task_id="smoke",
        job_name="smoke",
        job_queue="gpu-spot",
        job_definition="gpu-smoke",
        container_overrides={
            "command": ["sh", "-c", "echo line-one on $AWS_BATCH_CE_NAME; sleep 1; echo line-two; exit $BATCH_EXIT"],
            "environment": [{"name": "BATCH_EXIT", "value": os.environ.get("BATCH_EXIT", "0")}],
        },
        awslogs_enabled=True,
        awslogs_fetch_interval=timedelta(seconds=1),
        deferrable=os.environ.get("BATCH_DEFERRABLE") == "1",
        poll_interval=1,
    )

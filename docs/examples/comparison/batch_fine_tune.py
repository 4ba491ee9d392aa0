"""The comparison's worked example with the official ``BatchOperator`` alone.

The image and ``/dev/shm`` live in a job definition registered beforehand
(``JOB_DEFINITION``, e.g. ``aws batch register-job-definition --cli-input-json``); the GPU
type is whatever instance types the queue's compute environment allows (an A100 40GB on AWS
is a ``p4d.24xlarge``, eight of them). Batch's own ``retryStrategy`` runs the job again after
a spot reclaim and exits on anything else; moving to on-demand capacity after the reclaims is
not something the operator does. tests/docs/test_comparison.py parses this file and checks
both requests against botocore's model of the Batch API.
"""

from __future__ import annotations

import pendulum
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.sdk import DAG

IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
FINE_TUNE = ["python", "/app/finetune.py", "--checkpoint-dir", "/checkpoints/{{ run_id }}"]

JOB_DEFINITION = {
    "jobDefinitionName": "fine-tune-a100",
    "type": "container",
    "containerProperties": {
        "image": IMAGE,
        "resourceRequirements": [
            {"type": "GPU", "value": "1"},
            {"type": "VCPU", "value": "8"},
            {"type": "MEMORY", "value": "65536"},
        ],
        "linuxParameters": {"sharedMemorySize": 8192},
    },
}

with DAG(
    "comparison_fine_tune_batch",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["docs"],
):
    BatchOperator(
        task_id="fine_tune",
        job_name="fine-tune",
        job_definition="fine-tune-a100",
        job_queue="gpu-spot-p4d",  # a queue whose compute environment is SPOT p4d.24xlarge
        container_overrides={"command": FINE_TUNE},
        retry_strategy={
            "attempts": 4,  # the first run and three after reclaims
            "evaluateOnExit": [
                {"onStatusReason": "Host EC2*", "action": "RETRY"},  # host reclaimed
                {"onReason": "*", "action": "EXIT"},
            ],
        },
        awslogs_enabled=True,
        deferrable=True,
    )

"""The comparison's worked example with airflow-provider-gpu (docs/comparison.rst).

One fine-tune on one A100 40GB, spot first, the image pinned, written once for Kubernetes
and once for AWS Batch. tests/docs/test_comparison.py parses this file with Airflow's DagBag
and checks what each task would ask the platform for, so the page cannot show a DAG that no
longer parses.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

# Pinned, and checked when the DAG is parsed: CUDA 12.8 runs on the A100 (sm_80).
IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
FINE_TUNE = ["python", "/app/finetune.py", "--checkpoint-dir", "/checkpoints/{{ run_id }}"]
# Three reclaims on spot, then the same try goes on on-demand capacity; a bug fails at once.
SPOT = SpotPolicy(max_interruptions=3, fallback_to_on_demand=True, grace_period_seconds=90)

with DAG(
    "comparison_fine_tune",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-gpu", "docs"],
):
    GPUKubernetesOperator(
        task_id="fine_tune_on_kubernetes",
        accelerator="A100-40GB:1",
        image=IMAGE,
        cmds=FINE_TUNE,
        cpu=8,
        memory="64Gi",
        capacity="spot",
        spot=SPOT,
        retries=2,  # for what is neither a reclaim nor a bug: an image pull, an API outage
        deferrable=True,
    )

    GPUBatchOperator(
        task_id="fine_tune_on_batch",
        accelerator="A100-40GB:1",
        image=IMAGE,
        command=FINE_TUNE,
        vcpus=8,
        memory="64Gi",
        job_queues={"spot": "gpu-spot", "on-demand": "gpu-on-demand"},
        spot=SPOT,
        retries=2,
        deferrable=True,
    )

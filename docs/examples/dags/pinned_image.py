"""Train on an image pinned by its reference, checked against the GPU and the nodes' driver.

``image="auto"`` takes the newest catalog image that runs on the accelerator: a provider upgrade
whose catalog has a newer image changes what the task runs. A pinned reference does not change;
the operator still checks it when the DAG is parsed, against each candidate GPU and, with
``driver_version``, against the driver on your nodes.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

# [pin]
#: From ``airflow-gpu images --accelerator L4 --driver 550``: what "auto" picks today for an L4 on
#: nodes whose NVIDIA driver is 550.
IMAGE = "pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime"
#: The driver branch of the GPU nodes (``nvidia-smi`` on a node, or the GPU operator's driver version).
NODE_DRIVER = "550"
# [pin]


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, tags=["gpu"])
def pinned_image() -> None:
    # [task]
    GPUKubernetesOperator(
        task_id="train",
        accelerator=["L4", "A10G"],  # the pin must run on every candidate
        image=IMAGE,
        driver_version=NODE_DRIVER,  # a CUDA this driver cannot run fails at parse time
        cmds=["python", "train.py"],
        cpu=8,
        memory="32Gi",
    )
    # [task]


pinned_image()

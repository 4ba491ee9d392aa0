"""The comparison's worked example with the official ``KubernetesPodOperator`` alone.

Everything the GPU needs is spelled out by hand: the resource name, the node label and its
value for this GPU and capacity type, the taints to tolerate, a memory-backed ``/dev/shm``.
Nothing checks them before the pod is pending. Airflow's ``retries`` run the pod again after
any failure, a reclaim and a bug alike, on spot each time. tests/docs/test_comparison.py
parses this file.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
FINE_TUNE = ["python", "/app/finetune.py", "--checkpoint-dir", "/checkpoints/{{ run_id }}"]

with DAG(
    "comparison_fine_tune_kpo",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["docs"],
):
    KubernetesPodOperator(
        task_id="fine_tune",
        name="fine-tune",
        image=IMAGE,
        cmds=FINE_TUNE,
        container_resources=k8s.V1ResourceRequirements(
            requests={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
            limits={"memory": "64Gi", "nvidia.com/gpu": "1"},
        ),
        # The label GPU feature discovery puts on the node, and Karpenter's capacity type.
        node_selector={
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "karpenter.sh/capacity-type": "spot",
        },
        tolerations=[
            k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            k8s.V1Toleration(
                key="karpenter.sh/capacity-type",
                operator="Equal",
                value="spot",
                effect="NoSchedule",
            ),
        ],
        volumes=[
            k8s.V1Volume(
                name="dshm",
                empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit="8Gi"),
            ),
        ],
        volume_mounts=[k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm")],
        termination_grace_period=90,
        retries=3,
        retry_delay=timedelta(minutes=1),
        deferrable=True,
    )

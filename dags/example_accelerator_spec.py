"""One accelerator spec, checked at parse time, placed on Kubernetes with the official operator.

Until ``GPUKubernetesOperator`` does this for you, ``to_kubernetes`` turns a spec into the
resources, node affinity, tolerations and ``/dev/shm`` volume, and ``pod_operator_arguments``
hands them to ``KubernetesPodOperator``. A typo such as ``"H10:8"`` or a
MIG profile the GPU does not have fails when the scheduler parses this file, not on a GPU node.
"""

from __future__ import annotations

import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import dag, task

from airflow_gpu import Accelerator, recommend
from airflow_gpu.accelerators.kubernetes import to_kubernetes
from airflow_gpu.utils.kubernetes import pod_operator_arguments

TRAIN_ON = Accelerator.parse("A100-80GB:4")
SERVE_ON = Accelerator(type="H100", mig="3g.40gb")

placement = to_kubernetes(TRAIN_ON, cpu=32, memory="256Gi", capacity="spot-if-available")


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-provider-gpu", "example"],
    doc_md=__doc__,
)
def example_accelerator_spec() -> None:
    @task
    def size_the_model(parameters: str = "7B") -> list[str]:
        """What could hold a LoRA fine-tune of the model: the fewest devices per GPU type."""
        return [str(r.accelerator) for r in recommend(parameters, task="lora", precision="bf16")[:5]]

    train = KubernetesPodOperator(
        task_id="train",
        name="train",
        image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        cmds=["python", "-c", "import torch; print(torch.cuda.device_count(), 'GPUs')"],
        **pod_operator_arguments(placement),
        env_vars={"ACCELERATOR": str(TRAIN_ON)},
    )

    smoke_test = KubernetesPodOperator(
        task_id="serve_smoke_test",
        name="serve-smoke-test",
        image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        cmds=["nvidia-smi", "-L"],
        **pod_operator_arguments(to_kubernetes(SERVE_ON, memory="32Gi")),
    )

    size_the_model() >> train >> smoke_test


example_accelerator_spec()

"""A first GPU task: one L4 on Kubernetes, in an image chosen for it, profiled.

The accelerator spec, the image and the spot settings are checked when the DAG file is parsed: a
typo in ``accelerator`` is an import error in the UI, not a pod that never schedules.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

# What the container runs: list the GPUs it was given, then return a result through the
# ``::airflow-gpu-result::`` line (it becomes the task's XCom return value).
SAY_HELLO = """
import json, os, subprocess
print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout, flush=True)
print("::airflow-gpu-result::" + json.dumps({"accelerator": os.environ["AIRFLOW_GPU_ACCELERATOR"]}), flush=True)
"""


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, tags=["gpu"])
def first_gpu_task() -> None:
    GPUKubernetesOperator(
        task_id="hello_gpu",
        accelerator="L4",  # one NVIDIA L4: the GPU resource, node affinity and taint toleration
        image="auto",  # the newest PyTorch image whose CUDA runs on an L4
        cmds=["python3", "-c", SAY_HELLO],
        cpu=2,
        memory="8Gi",
        # kubernetes_conn_id="kubernetes_default" (the default); the pod goes to its namespace
    )


first_gpu_task()

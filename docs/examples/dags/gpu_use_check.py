"""Fail the run when the GPU report says the GPUs were wasted, instead of reading it by eye.

Each profiled task pushes XCom ``gpu_profile``, whose ``advice`` is a list of ``{"kind",
"message", "detail"}``. ``check_gpu_use`` reads it after the training and fails on the kinds that
mean money spent on GPUs that did no work; the other kinds stay advice for a person.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

# [enforce]
#: Advice that means GPUs paid for and left idle.
WASTE = {"multi-gpu-unused", "idle"}


def wasted(profile: Mapping[str, Any] | None) -> list[str]:
    """The messages of the report's advice about waste; [] for a task that was not profiled."""
    advice = (profile or {}).get("advice") or []
    return [entry["message"] for entry in advice if entry["kind"] in WASTE]


# [enforce]


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, tags=["gpu"])
def gpu_use_check() -> None:
    # [dag]
    train = GPUKubernetesOperator(
        task_id="train",
        accelerator="A10G:4",
        image="auto",
        cmds=["accelerate", "launch", "--multi_gpu", "--num_processes", "4", "train.py"],
        cpu=32,
        memory="128Gi",
        gpu_profile=True,  # the default on NVIDIA GPUs; said here because this DAG relies on it
    )

    @task
    def check_gpu_use(ti: Any = None) -> None:
        problems = wasted(ti.xcom_pull(task_ids="train", key="gpu_profile"))
        if problems:
            raise ValueError("the GPUs were not used: " + "; ".join(problems))

    train >> check_gpu_use()
    # [dag]


gpu_use_check()

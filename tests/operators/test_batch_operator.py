"""``GPUBatchOperator`` at parse time: bad input fails when the DAG is parsed, the spec becomes the job."""

from __future__ import annotations

import pytest

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.spot.policy import Placement, SpotPolicy

QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}


def test_the_spec_becomes_placements_images_and_overrides() -> None:
    op = GPUBatchOperator(
        task_id="t", accelerator=["H100:8", "A10G:4"], job_queues=QUEUES, command=["python", "train.py"],
        environment={"EPOCHS": "3"}, spot=SpotPolicy(max_interruptions=2),
    )  # fmt: skip
    assert op.job_queue == "gpu-spot" and op.initial_capacity == "spot"
    assert [str(c) for c in op.candidates] == ["H100:8", "A10G:4"]
    assert all(image.startswith("pytorch/pytorch:") for image in op.images)
    assert {"type": "GPU", "value": "8"} in op.placements[0].resource_requirements
    assert op.placements[1].linux_parameters["sharedMemorySize"] > 0
    assert op.spot_run.environment() == {
        "AIRFLOW_GPU_ACCELERATOR": "H100:8",
        "AIRFLOW_GPU_CAPACITY": "spot",
        "AIRFLOW_GPU_ATTEMPT": "1",
        "AIRFLOW_GPU_INTERRUPTIONS": "0",
    }
    op.spot_run.move_to(Placement(1, "on-demand"))
    assert op._queue_for(op.spot_run.placement) == "gpu-on-demand" and str(op.accelerator) == "A10G:4"


def test_a_users_job_definition_gets_the_spec_as_overrides() -> None:
    op = GPUBatchOperator(task_id="t", accelerator="L4:2", job_queue="gpu", job_definition="mine:3", command=["x"])
    assert op.initial_capacity is None and op._queue_for(op.spot_run.placement) == "gpu"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"accelerator": "H10", "job_queue": "q"}, "type"),
        ({"accelerator": "A100-80GB-MIG-3g.40gb", "job_queue": "q"}, "mig"),  # Batch hands out whole GPUs
        ({"accelerator": "MI300X", "job_queue": "q"}, "type"),  # no AWS instance type carries it
        ({"accelerator": "L4"}, "job_queue"),
        ({"accelerator": "L4", "job_queue": "q", "job_queues": QUEUES}, "job_queues"),
        ({"accelerator": "L4", "job_queues": {"preemptible": "q"}}, "job_queues"),
    ],
)
def test_bad_input_fails_when_the_operator_is_built(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(AcceleratorSpecError) as error:
        GPUBatchOperator(task_id="t", **kwargs)  # type: ignore[arg-type]
    assert error.value.field == field

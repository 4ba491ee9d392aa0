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
    env = {e["name"]: e["value"] for e in op._overrides()["environment"]}
    assert env == {
        "EPOCHS": "3",
        "AIRFLOW_GPU_ACCELERATOR": "H100:8",
        "AIRFLOW_GPU_CAPACITY": "spot",
        "AIRFLOW_GPU_ATTEMPT": "1",
        "AIRFLOW_GPU_INTERRUPTIONS": "0",
    }
    op._placement = Placement(1, "on-demand")
    assert op._queue_for(op._placement) == "gpu-on-demand" and str(op.accelerator) == "A10G:4"


def test_a_users_job_definition_gets_the_spec_as_overrides() -> None:
    op = GPUBatchOperator(task_id="t", accelerator="L4:2", job_queue="gpu", job_definition="mine:3", command=["x"])
    overrides = op._overrides()
    assert {"type": "GPU", "value": "2"} in overrides["resourceRequirements"] and overrides["command"] == ["x"]
    assert op.initial_capacity is None and op._queue_for(op._placement) == "gpu"


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


def test_each_candidate_goes_to_a_queue_that_launches_it() -> None:
    """Queue offers are real ``QueueOffer`` values built from the catalog, as ``queue_offers`` returns them."""
    from airflow_gpu.accelerators.batch import instance_offers
    from airflow_gpu.hooks.batch import QueueOffer

    op = GPUBatchOperator(task_id="t", accelerator=["H100:8", "L4"], job_queues=QUEUES)
    op._offers = {
        "gpu-spot": QueueOffer("gpu-spot", "spot", instance_offers(["g5", "g6"])),
        "gpu-on-demand": QueueOffer("gpu-on-demand", "on-demand", instance_offers(["p5"])),
    }
    assert op._placement_offered(Placement(0, "spot")) == Placement(0, "on-demand")  # H100 only on demand
    op._offers["gpu-on-demand"] = QueueOffer("gpu-on-demand", "on-demand", instance_offers(["g6"]))
    assert op._placement_offered(Placement(0, "spot")) == Placement(1, "spot")  # no H100 anywhere: L4 on spot
    assert op._placement_offered(Placement(1, "on-demand")) == Placement(1, "on-demand")


def test_without_an_on_demand_queue_spot_exhaustion_fails_instead_of_falling_back() -> None:
    from airflow_gpu.spot.classifier import Classification, Outcome

    op = GPUBatchOperator(task_id="t", accelerator="L4", job_queues={"spot": "gpu-spot"}, spot={"max_interruptions": 0})
    reclaim = {"container": {"exitCode": 143}, "statusReason": "Host EC2 (instance i-1) terminated."}
    job = {"jobId": "j", "status": "FAILED", "attempts": [reclaim]}

    class Ti:
        def xcom_push(self, key: str, value: object) -> None:
            """XCom is a boundary this test owns: the values are not under test here."""

    with pytest.raises(Exception, match="more than max_interruptions=0") as error:
        op._after({"ti": Ti()}, job, Classification(Outcome.PREEMPTED, "SpotReclaim", "reclaimed", 143, True))
    assert "falling back" not in str(error.value)

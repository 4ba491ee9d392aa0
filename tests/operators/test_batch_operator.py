"""``GPUBatchOperator`` at parse time: bad input fails when the DAG is parsed, the spec becomes the job."""

from __future__ import annotations

import json

import pytest

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.accelerators import batch_job
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.profiling import bundle
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


def test_a_profiled_job_runs_its_command_under_the_profiler() -> None:
    """``gpu_profile`` (on for NVIDIA GPUs) wraps the command; the profiler's code rides in the job
    definition this operator registers, so the overrides stay far below ECS's 8,192 characters."""
    op = GPUBatchOperator(task_id="t", accelerator="A10G:4", job_queues=QUEUES, command=["python", "train.py"])
    overrides = op._overrides(op.spot_run.placement)
    assert overrides["command"][:2] == ["/bin/sh", "-c"] and overrides["command"][-2:] == ["python", "train.py"]
    assert "$AIRFLOW_GPU_PROFILER_BUNDLE" in overrides["command"][2]
    assert batch_job.overrides_too_long(overrides) is None and len(json.dumps(overrides)) < 2048
    env = {e["name"]: e["value"] for e in overrides["environment"]}
    assert env["AIRFLOW_GPU_PROFILE_INTERVAL"] == "1.0" and env["AIRFLOW_GPU_SPOT_NOTICE_FILE"]
    assert env.get("AIRFLOW_GPU_IMDS") != "off"  # on spot the profiler polls for interruption notices
    assert op.command == ["python", "train.py"]  # rendered again for the next job, never rewrapped
    definition = batch_job.job_definition(
        "img", op.placements[0], {}, "A10G:4", environment=bundle.environment(batch=True)
    )
    names = {e["name"] for e in definition["containerProperties"]["environment"]}
    assert names == {bundle.ENV_BUNDLE, bundle.ENV_BOOTSTRAP}


def test_what_is_not_profiled_on_batch() -> None:
    """A user's own job definition cannot carry the profiler's code, nor can a job without a command."""
    own = GPUBatchOperator(
        task_id="t", accelerator="L4", job_queue="gpu", job_definition="mine:3",
        container_overrides={"command": ["./run.sh"]},
    )  # fmt: skip
    assert own._overrides(own.spot_run.placement)["command"] == ["./run.sh"] and not own._wrapped
    plain = GPUBatchOperator(task_id="t", accelerator="L4", job_queue="gpu", command=["x"], gpu_profile=False)
    assert plain._overrides(plain.spot_run.placement)["command"] == ["x"] and not plain._wrapped
    no_command = GPUBatchOperator(task_id="t", accelerator="L4", job_queue="gpu")
    assert "command" not in no_command._overrides(no_command.spot_run.placement) and not no_command._wrapped
    on_demand = GPUBatchOperator(task_id="t", accelerator="L4", job_queues={"on-demand": "q"}, command=["x"])
    env = {e["name"]: e["value"] for e in on_demand._overrides(on_demand.spot_run.placement)["environment"]}
    assert env["AIRFLOW_GPU_IMDS"] == "off"  # no spot to be warned about


def test_overrides_ecs_would_refuse_are_caught_before_submitting() -> None:
    assert batch_job.overrides_too_long({"command": ["echo", "x" * 9000]}) is not None
    assert batch_job.overrides_too_long({"command": ["echo", "x" * 8000]}) is None


@pytest.mark.parametrize("interval", [0, 0.01, 61])
def test_a_sampling_interval_that_cannot_work_is_refused_at_parse_time(interval: float) -> None:
    with pytest.raises(AcceleratorSpecError) as error:
        GPUBatchOperator(task_id="t", accelerator="L4", job_queue="q", command=["x"], profile_interval=interval)
    assert error.value.field == "profile_interval"


def test_the_profiled_job_definition_fits_the_24_kib_batch_allows() -> None:
    """RegisterJobDefinition refuses more than 24 KiB (AWS Batch service quotas): the profiler's code
    in the environment must leave room for the rest of the definition (a long image name, tags)."""
    op = GPUBatchOperator(task_id="t", accelerator="H100:8", job_queue="q", command=["python", "train.py"])
    definition = batch_job.job_definition(
        op.images[0], op.placements[0], {"attempts": 10}, "H100:8", environment=bundle.environment(batch=True)
    )
    assert len(json.dumps({"jobDefinitionName": "x" * 128, **definition})) < 22 * 1024  # 2 KiB to spare

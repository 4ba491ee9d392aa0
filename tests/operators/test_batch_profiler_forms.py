"""The profiler's wrapper form a ``GPUBatchOperator`` image needs, kept for the task's later tries (issue 25
leftovers, B), against the AWS Batch emulator.

An image without ``/bin/sh`` (distroless) fails the wrapped job's start with Docker's
``CannotStartContainerError`` (``exec: "/bin/sh": stat /bin/sh: no such file or directory``); the job is
submitted again with the profiler started by ``python3`` alone, then unprofiled. Each failed start is a
job AWS Batch schedules and bills for seconds to minutes: a later try (an Airflow retry) starts with the
form that worked, from the task state store (Airflow 3.3+, key ``airflow_gpu_profiler_forms``, as
``GPUKubernetesOperator`` keeps it), and so do its resubmissions, the worker's and the triggerer's. A
deferred task's form also survives the resume on another worker process, which knows only the run's state.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu.images import registry
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.profiler_forms import FORMS_KEY
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.images import distroless
from tests.operators.conftest import LOG_LAG
from tests.operators.task_context import Store, Ti
from tests.operators.test_batch_operator_deferred import (
    defer,
    first_event,
    gated_result,
    reclaim_when_running,
    resume,
    trigger_of,
)
from tests.operators.test_batch_operator_runs import described

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_backoff")]
QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
PYTHON_IMAGE = "gcr.io/distroless/python3-debian12:latest"
STATIC_IMAGE = "gcr.io/distroless/static-debian12:nonroot"
RESULT_LINE = '::airflow-gpu-result::{"loss": 0.25}\n'


@pytest.fixture(autouse=True)
def fresh_registry_reads() -> None:
    registry.forget()  # each test's emulator is a new mirror with new images


def operator(image: str, command: list[str], **kwargs: Any) -> GPUBatchOperator:
    return GPUBatchOperator(
        task_id="train", accelerator="A10G:1", job_queues=QUEUES, image=image, command=command,
        poll_interval=0.2, awslogs_fetch_interval=0.5, log_lag=LOG_LAG, spot={"capacity_timeout": 30}, **kwargs,
    )  # fmt: skip


def commands(emulator: BatchEmulator) -> list[list[str]]:
    return [job["container"]["command"] for job in described(emulator)]


def test_a_later_try_starts_with_python3_where_the_first_found_no_shell(aws_default_connection: BatchEmulator) -> None:
    emulator, store = aws_default_connection, Store()
    emulator.declare_image(PYTHON_IMAGE, distroless(python=True))
    command = ["printf", RESULT_LINE]
    assert operator(PYTHON_IMAGE, command).execute({"ti": Ti(1), "task_state_store": store}) == {"loss": 0.25}
    assert [c[0] for c in commands(emulator)] == ["/bin/sh", "python3"]
    assert store[FORMS_KEY] == {PYTHON_IMAGE: "python3"}
    later = Ti(2, max_tries=1)  # cleared after its success: Airflow raises max_tries
    assert operator(PYTHON_IMAGE, command).execute({"ti": later, "task_state_store": store}) == {"loss": 0.25}
    third = described(emulator)[2:]
    assert [(j["status"], j["container"]["command"][:2]) for j in third] == [("SUCCEEDED", ["python3", "-c"])]
    assert later.xcom["gpu_profile"]["exit_code"] == 0  # profiled, at the first start
    assert later.xcom["gpu_interruptions"] == []


def test_a_later_try_of_an_image_without_shell_or_python_starts_unprofiled_with_the_note(
    aws_default_connection: BatchEmulator,
) -> None:
    emulator, store = aws_default_connection, Store()
    emulator.declare_image(STATIC_IMAGE, distroless())
    command = ["printf", RESULT_LINE]
    assert operator(STATIC_IMAGE, command).execute({"ti": Ti(1), "task_state_store": store}) == {"loss": 0.25}
    assert len(described(emulator)) == 3 and store[FORMS_KEY] == {STATIC_IMAGE: "none"}
    later = Ti(2, max_tries=1)  # cleared after its success: Airflow raises max_tries
    assert operator(STATIC_IMAGE, command).execute({"ti": later, "task_state_store": store}) == {"loss": 0.25}
    assert commands(emulator)[3:] == [command]  # one job, the command itself
    assert later.xcom["gpu_profile"]["note"].startswith(f"not profiled: image {STATIC_IMAGE} has neither")


def test_deferred_tries_keep_the_form_through_resumes_and_the_triggers_resubmission(
    aws_default_connection: BatchEmulator, tmp_path: Path
) -> None:
    """Try 1 defers; its job cannot start /bin/sh; a new worker process resumes, submits the python3 form and
    defers again. Try 2 starts with python3; its job is reclaimed and the trigger's replacement keeps it."""
    emulator, store, gate = aws_default_connection, Store(), tmp_path / "gate"
    emulator.declare_image(PYTHON_IMAGE, distroless(python=True))
    arguments: dict[str, Any] = {"image": PYTHON_IMAGE, "command": gated_result(gate, python="python3")}
    gate.touch()  # try 1 runs to its end
    first = {"ti": Ti(1), "task_state_store": store}
    deferred = defer(first, **arguments)
    event = asyncio.run(first_event(trigger_of(deferred)))
    assert event["job_status"] == "FAILED", event
    with pytest.raises(TaskDeferred) as again:  # the python3 form's job is waited for
        resume(deferred, event, first, **arguments)
    assert [c[0] for c in commands(emulator)] == ["/bin/sh", "python3"]
    event = asyncio.run(first_event(trigger_of(again.value)))
    assert resume(again.value, event, first, **arguments) == {"loss": 0.25}
    assert store[FORMS_KEY] == {PYTHON_IMAGE: "python3"}

    second = {"ti": Ti(2, max_tries=1), "task_state_store": store}  # cleared after its success
    gate.unlink()  # try 2's first job runs until it is reclaimed
    deferred = defer(second, **arguments)
    reclaimer = reclaim_when_running(emulator, "train", after_line="checkpoint 1", then_open=gate)
    event = asyncio.run(first_event(trigger_of(deferred)))
    reclaimed = reclaimer.finished()
    assert resume(deferred, event, second, **arguments) == {"loss": 0.25}
    later = described(emulator)[2:]
    assert reclaimed == later[0]["jobId"]
    assert [(j["jobName"], j["container"]["command"][0]) for j in later] == [("train", "python3"),
                                                                              ("train-r1", "python3")]  # fmt: skip
    assert [i["outcome"] for i in second["ti"].xcom["gpu_interruptions"]] == ["preempted"]

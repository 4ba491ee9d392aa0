"""The reaper on AWS Batch: the Batch emulator (moto's server) over HTTP through boto3, Airflow's answers recorded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.accelerators.batch_job import identity_tags
from airflow_gpu.reap.batch import BatchResources
from airflow_gpu.reap.reaper import reap
from airflow_gpu.reap.rules import InstanceState
from airflow_gpu.testing.batch.emulator import BatchEmulator
from tests.operators.task_context import Ti
from tests.reap.conftest import RUN, RecordedAirflow
from tests.testing.batch.api import describe, final, register, status_is


@pytest.fixture
def calls(batch_emulator: BatchEmulator) -> Iterator[list[tuple[str, str]]]:
    """Every Batch call the reaper's client sends, as (operation, job id)."""
    made: list[tuple[str, str]] = []
    client = batch_emulator.client("batch")

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        made.append((model.name, params.get("jobId", "")))

    client.meta.events.register("before-parameter-build.batch", record)
    yield made
    client.meta.events.unregister("before-parameter-build.batch", record)


def test_a_running_orphan_is_terminated_a_runnable_one_cancelled_and_a_plain_job_left(
    batch_emulator: BatchEmulator, calls: list[tuple[str, str]], tmp_path: Path
) -> None:
    batch = batch_emulator.client("batch")
    release = tmp_path / "release"
    runs = register(batch, "runs", ["sh", "-c", f"until [ -e {release} ]; do sleep 0.05; done"])
    orphan_tags = identity_tags(Ti(1, dag_id="gpu", task_id="failed", run_id=RUN, map_index=4))
    running = batch.submit_job(jobName="failed-m4", jobQueue="gpu-on-demand", jobDefinition=runs, tags=orphan_tags)
    plain = batch.submit_job(jobName="someone-elses", jobQueue="gpu-on-demand", jobDefinition=runs,
                             tags={"team": "research"})  # fmt: skip
    kept_tags = identity_tags(Ti(1, dag_id="gpu", task_id="runs", run_id=RUN))
    alive = batch.submit_job(jobName="runs", jobQueue="gpu-on-demand", jobDefinition=runs, tags=kept_tags)
    for job in (running, plain, alive):
        status_is(batch, job["jobId"], "RUNNING")
    batch_emulator.stall("gpu-spot-ce")
    waiting = batch.submit_job(jobName="failed-m4", jobQueue="gpu-spot", jobDefinition=runs, tags=orphan_tags)
    status_is(batch, waiting["jobId"], "RUNNABLE")
    airflow = RecordedAirflow({
        ("gpu", "failed", RUN, 4): InstanceState("failed", 1),
        ("gpu", "runs", RUN, -1): InstanceState("running", 1),
    })  # fmt: skip
    source = BatchResources(batch, ["gpu-on-demand", "gpu-spot"])

    listed = reap([source], airflow, grace=timedelta(0))
    assert sorted((f.resource.name, f.resource.status) for f in listed.orphans) == sorted(
        [(running["jobId"], "RUNNING"), (waiting["jobId"], "RUNNABLE")]
    )
    assert listed.kept == 1 and not [c for c in calls if c[0] in ("CancelJob", "TerminateJob")]

    done = reap([source], airflow, delete=True, grace=timedelta(0))
    actions = {f.resource.name: f.action for f in done.orphans}
    assert actions == {running["jobId"]: "terminated (TerminateJob)", waiting["jobId"]: "cancelled (CancelJob)"}
    stops = [c for c in calls if c[0] in ("CancelJob", "TerminateJob")]
    assert sorted(stops) == sorted([("TerminateJob", running["jobId"]), ("CancelJob", waiting["jobId"])])
    assert final(batch, running["jobId"])["status"] == "FAILED"
    cancelled = final(batch, waiting["jobId"])
    assert cancelled["status"] == "FAILED" and cancelled["statusReason"].startswith(
        "airflow-gpu reap: orphan of gpu.failed"
    )
    assert describe(batch, plain["jobId"])["status"] == "RUNNING"
    assert describe(batch, alive["jobId"])["status"] == "RUNNING"
    release.touch()


def test_every_queue_is_looked_at_when_none_is_named(batch_emulator: BatchEmulator, tmp_path: Path) -> None:
    batch = batch_emulator.client("batch")
    runs = register(batch, "runs", ["sh", "-c", f"until [ -e {tmp_path / 'release'} ]; do sleep 0.05; done"])
    tags = identity_tags(Ti(1, dag_id="gpu", task_id="gone", run_id=RUN))
    job = batch.submit_job(jobName="gone", jobQueue="gpu-spot", jobDefinition=runs, tags=tags)
    status_is(batch, job["jobId"], "RUNNING")
    report = reap([BatchResources(batch)], RecordedAirflow({}), grace=timedelta(0))
    assert [(f.resource.name, f.resource.scope) for f in report.orphans] == [(job["jobId"], "gpu-spot")]
    assert report.orphans[0].why.startswith("Airflow has no such task instance")
    (tmp_path / "release").touch()

"""The resume dwell (apache/airflow#72716) is read from ``[gpu] resume_dwell_seconds`` at each use."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_gpu.triggers import resume_dwell


def test_the_dwell_comes_from_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.common.compat.sdk import conf

    monkeypatch.delenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", raising=False)
    assert resume_dwell.dwell_seconds() == 0.0  # the suite's airflow.cfg says so (tests/conftest.py)
    conf.remove_option("gpu", "resume_dwell_seconds")
    try:
        assert resume_dwell.dwell_seconds() == resume_dwell.RESUME_DWELL_SECONDS  # what users get
    finally:
        conf.set("gpu", "resume_dwell_seconds", "0")
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "30")
    assert resume_dwell.dwell_seconds() == 30.0
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "-5")
    assert resume_dwell.dwell_seconds() == 0.0


def test_a_dwell_of_zero_fires_at_once_and_one_holds_until_it_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "0")
    started = time.monotonic()
    asyncio.run(resume_dwell.dwell(time.time()))
    assert time.monotonic() - started < 0.5
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "1")
    started = time.monotonic()
    asyncio.run(resume_dwell.dwell(time.time()))
    assert time.monotonic() - started >= 0.9


def test_a_trigger_run_in_process_does_not_dwell_and_one_in_a_triggerer_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dag.test()`` runs a deferred task's trigger inline, with Airflow's in-process comms: no scheduler there
    to race, so a user's CI test of a deferrable GPU DAG does not wait 10 s a deferral. A trigger runner in a
    triggerer (its comms: ``TriggerCommsDecoder``) keeps the dwell."""
    from airflow.jobs.triggerer_job_runner import TriggerCommsDecoder
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

    from airflow_gpu.utils import supervision

    assert InProcessSupervisorComms.__name__ == supervision.IN_PROCESS_COMMS  # told by name: a rename fails here
    monkeypatch.setenv("AIRFLOW__GPU__RESUME_DWELL_SECONDS", "1")
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object.__new__(InProcessSupervisorComms), raising=False)
    assert supervision.in_process() and not supervision.supervised()
    started = time.monotonic()
    asyncio.run(resume_dwell.dwell(time.time()))
    assert time.monotonic() - started < 0.5
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object.__new__(TriggerCommsDecoder))
    assert supervision.supervised() and not supervision.in_process()
    started = time.monotonic()
    asyncio.run(resume_dwell.dwell(time.time()))
    assert time.monotonic() - started >= 0.9

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

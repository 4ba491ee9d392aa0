"""One Batch emulator per test module, reached through boto3 only, as a client of AWS reaches Batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_gpu.testing.batch.emulator import BatchEmulator

#: CloudWatch's ingestion lag in these tests: shorter than the emulator's default (``test_logs``
#: covers that one) but never zero, so that every reader of a job's log still has to wait for it.
INGESTION_DELAY = 0.5


@pytest.fixture(scope="module")
def emulator() -> Iterator[BatchEmulator]:
    with BatchEmulator(stop_timeout=2, log_ingestion_delay=INGESTION_DELAY) as running:
        yield running


@pytest.fixture(scope="module")
def batch(emulator: BatchEmulator) -> Any:
    return emulator.client("batch")


@pytest.fixture
def stalled_spot(emulator: BatchEmulator) -> Iterator[None]:
    emulator.stall("gpu-spot-ce")
    try:
        yield
    finally:
        emulator.release("gpu-spot-ce")

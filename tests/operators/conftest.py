"""Fixtures of the operator tests: shorter backoff pauses to opt in to (``tests/quick_waits.py``), and the
Batch emulator with a shorter CloudWatch ingestion delay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.quick_waits import fast_api_backoff, fast_backoff

if TYPE_CHECKING:
    from airflow_gpu.testing.batch.emulator import BatchEmulator

__all__ = ["batch_emulator", "fast_api_backoff", "fast_backoff"]

#: Seconds before a job's line is readable in CloudWatch Logs here: still later than the operators' 0.2 s
#: polls see the job end (the lag the result read must wait out), a third of the plugin's 1.5 s; the
#: operators here wait ``LOG_LAG``, twice it, as 10 s bounds it on AWS.
LOG_INGESTION_DELAY = 0.5
LOG_LAG = 2 * LOG_INGESTION_DELAY


@pytest.fixture
def batch_emulator() -> Iterator[BatchEmulator]:
    """The plugin's ``batch_emulator`` (``aws_default_connection`` uses it), with ``LOG_INGESTION_DELAY``."""
    from airflow_gpu.testing.batch.emulator import BatchEmulator

    with BatchEmulator(stop_timeout=5, log_ingestion_delay=LOG_INGESTION_DELAY) as emulator:
        yield emulator

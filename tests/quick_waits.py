"""Fixtures that shorten the production code's backoff pauses in the in-process emulator tests.

Most of those tests' wall time was real sleeping: botocore's standard-mode backoff (up to 20 s a
pause on a throttle), our rounds on top of it (``utils.batch_retries``, up to a minute) and the
Kubernetes calls' exponential backoff (``utils.api_retry``, 1 s doubling to 30 s). The tests are
about how many faults are ridden out and what the task does after them, not how long a pause is:
here only the pauses shrink. The faults stay the same in kind and number, every attempt count stays
as configured, and ``Retry-After`` is still honoured as the server sends it (tests send small values;
``tests/triggers/test_gpu_pod_trigger_transient.py`` checks that the wait is the header's).

The conftests of ``tests/operators`` and ``tests/triggers`` re-export these; a test module opts in
with ``pytest.mark.usefixtures("fast_backoff")`` or ``("fast_api_backoff")``.
"""

from __future__ import annotations

import time

import pytest

#: The pause that replaces every backoff pause, seconds: long enough to hand the emulator's threads the CPU.
PAUSE = 0.01


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS: botocore's standard-mode pauses (up to 20 s each) and our rounds' (``batch_retries.sleep``)."""
    from botocore.retries.standard import ExponentialBackoff

    from airflow_gpu.utils import batch_retries

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: PAUSE)
    monkeypatch.setattr(batch_retries, "sleep", lambda seconds: time.sleep(PAUSE))


@pytest.fixture
def fast_api_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes: ``api_retry``'s backoff without ``Retry-After`` starts at 0.05 s and stops growing at 0.2 s
    (1 s and 30 s in production). A ``Retry-After`` is still waited out as sent."""
    from airflow_gpu.utils import api_retry

    monkeypatch.setattr(api_retry, "FIRST_WAIT_SECONDS", 0.05)
    monkeypatch.setattr(api_retry, "MAX_WAIT_SECONDS", 0.2)

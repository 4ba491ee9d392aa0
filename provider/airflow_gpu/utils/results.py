"""What both GPU operators agree on with the workload and with downstream tasks.

A workload returns a value by printing one line ``::airflow-gpu-result::<json>``: no XCom
sidecar, ``pods/exec`` or S3 round trip needed, on Kubernetes or Batch alike. The XCom keys are
the same for both operators so a reduce step or a dashboard reads either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

RESULT_MARKER = "::airflow-gpu-result::"
INTERRUPTIONS_XCOM_KEY = "gpu_interruptions"
ACCELERATOR_XCOM_KEY = "gpu_accelerator"


class ResultError(ValueError):
    """The workload printed a result line that is not JSON."""


def last_result(lines: Iterable[str]) -> tuple[bool, Any]:
    """``(found, value)`` for the last result line among ``lines``; ``ResultError`` if it is not JSON."""
    found = [line for line in lines if line.startswith(RESULT_MARKER)]
    if not found:
        return False, None
    try:
        return True, json.loads(found[-1][len(RESULT_MARKER) :])
    except ValueError as error:
        raise ResultError(f"the workload printed a result that is not JSON: {found[-1]!r}") from error

"""What both GPU operators agree on with the workload and with downstream tasks.

A workload returns a value by printing one line ``::airflow-gpu-result::<json>``: no XCom
sidecar, ``pods/exec`` or S3 round trip needed, on Kubernetes or Batch alike. The XCom keys are
the same for both operators so a reduce step or a dashboard reads either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_gpu.profiling.termination import RESULT_MARKER as RESULT_MARKER  # the profiler catches it too

INTERRUPTIONS_XCOM_KEY = "gpu_interruptions"
ACCELERATOR_XCOM_KEY = "gpu_accelerator"


class ResultError(ValueError):
    """The workload printed a result line that is not JSON."""


def last_result_line(lines: Iterable[str]) -> str | None:
    """The last of ``lines`` that starts with the result marker, None when there is none."""
    found = [line for line in lines if line.startswith(RESULT_MARKER)]
    return found[-1] if found else None


def last_result(lines: Iterable[str]) -> tuple[bool, Any]:
    """``(found, value)`` for the last result line among ``lines``; ``ResultError`` if it is not JSON."""
    line = last_result_line(lines)
    if line is None:
        return False, None
    try:
        return True, json.loads(line[len(RESULT_MARKER) :])
    except ValueError as error:
        raise ResultError(f"the workload printed a result that is not JSON: {line!r}") from error


PROFILE_XCOM_KEY = "gpu_profile"


@dataclass(frozen=True)
class WorkloadOutput:
    """What a finished workload left in its log for Airflow: the result line and the GPU profile.

    ``profile_warning`` says why a profile the workload printed was not taken (cut, tampered
    with, too big); it is None when none was printed or it was taken. ``unread`` says why the log
    could not be read (no log stream, access denied): None when it was read, found lines or not.
    """

    result_found: bool = False
    result: Any = None
    result_error: ResultError | None = None
    profile: dict[str, Any] | None = None
    profile_printed: bool = False
    profile_warning: str | None = None
    unread: str | None = None


def read_output(lines: Iterable[str]) -> WorkloadOutput:
    """The result line and the profile marker of one workload's log, read by both operators alike."""
    from airflow_gpu.profiling.marker import PROFILE_MARKER, read_profile

    lines = list(lines)
    try:
        found, value = last_result(lines)
        error = None
    except ResultError as bad:
        found, value, error = True, None, bad
    printed = any(line.startswith(PROFILE_MARKER) for line in lines)
    profile, warning = read_profile(lines) if printed else (None, None)
    return WorkloadOutput(found, value, error, profile, printed, warning)


def missing_result(workload: str, unread: str | None, hint: str = "") -> str:
    """The one warning of a success whose result cannot be read: the task returns None, never a
    stand-in (a job id) that a downstream task would take for the workload's result."""
    why = f"its log could not be read ({unread})" if unread else f"it printed no {RESULT_MARKER} line{hint}"
    return f"{workload} succeeded, but its result is missing: {why}. The task returns None (no return_value XCom)."

"""When each task try's trigger last wrote to its log, read from the task logs Airflow keeps.

A trigger's lines go to ``attempt=<try>.log.trigger.<triggerer job id>.log`` beside the task's log, one file
per triggerer that ran it, each line JSON with its ``timestamp``. The judge asks whether a trigger ran
anywhere between a triggerer's kill and a person's mark (``invariants.stranded_by_a_mark``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from airflow_gpu.testing.soak.observer import TryKey

__all__ = ["last_trigger_lines"]

_PART = re.compile(r"^(dag_id|run_id|task_id|map_index)=(.*)$")
_ATTEMPT = re.compile(r"^attempt=(\d+)\.log\.trigger\.\d+\.log$")


def last_trigger_lines(logs: Path) -> dict[TryKey, float]:
    """Each try's last trigger log line, as an epoch, over every triggerer's file of it."""
    last: dict[TryKey, float] = {}
    for path in logs.glob("dag_id=*/run_id=*/task_id=*/**/attempt=*.log.trigger.*.log"):
        attempt = _ATTEMPT.match(path.name)
        parts: dict[str, str] = {}
        for part in path.relative_to(logs).parts[:-1]:
            if found := _PART.match(part):
                parts[found.group(1)] = found.group(2)
        if attempt is None or not {"dag_id", "run_id", "task_id"} <= parts.keys():
            continue
        key = (parts["dag_id"], parts["task_id"], parts["run_id"], int(parts.get("map_index", -1)),
               int(attempt.group(1)))  # fmt: skip
        for at in _stamps(path):
            last[key] = max(at, last.get(key, at))
    return last


def _stamps(path: Path) -> list[float]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            stamp = json.loads(line).get("timestamp")
            found.append(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp())
        except (ValueError, AttributeError, TypeError):
            continue  # a traceback's lines, a partial last line
    return found

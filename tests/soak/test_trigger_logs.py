"""``trigger_logs.last_trigger_lines`` over a task log tree laid out as Airflow writes it (files written here)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from airflow_gpu.testing.soak.trigger_logs import last_trigger_lines


def line(stamp: str) -> str:
    return json.dumps({"timestamp": stamp, "level": "info", "event": "a trigger's line"})


def test_each_try_s_last_line_over_every_triggerer_s_file(tmp_path: Path) -> None:
    mapped = tmp_path / "dag_id=fan/run_id=manual__2026-11-27T20:35:40+00:00/task_id=shard/map_index=3"
    plain = tmp_path / "dag_id=train/run_id=manual__2026-11-27T20:35:40+00:00/task_id=train"
    for folder in (mapped, plain):
        folder.mkdir(parents=True)
    (mapped / "attempt=1.log.trigger.2.log").write_text(line("2026-11-27T20:36:00.074Z") + "\nTraceback ...\n")
    (mapped / "attempt=1.log.trigger.5.log").write_text(line("2026-11-27T20:36:40.500Z") + "\n")
    (plain / "attempt=2.log.trigger.2.log").write_text(line("2026-11-27T20:37:00Z") + "\n")
    (plain / "attempt=2.log").write_text(line("2026-11-27T20:38:00Z") + "\n")  # the task's own log: not a trigger's
    found = last_trigger_lines(tmp_path)
    run = "manual__2026-11-27T20:35:40+00:00"
    assert found == {
        ("fan", "shard", run, 3, 1): datetime.fromisoformat("2026-11-27T20:36:40.500+00:00").timestamp(),
        ("train", "train", run, -1, 2): datetime.fromisoformat("2026-11-27T20:37:00+00:00").timestamp(),
    }

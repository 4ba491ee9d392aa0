"""One reaper round: list every backend's candidates, ask Airflow about each task instance, judge, delete.

Every question is asked before anything is deleted: Airflow gone silent half-way
(``AirflowUnreachable``) ends the round with nothing deleted. A task instance is asked about once,
whatever number of pods, Jobs or Batch jobs it has. The backends (``kubernetes``, ``batch``) and the
state source are passed in: the command line builds the real ones, tests may pass a state source
of their own (the one boundary they stand in for).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Protocol

from airflow_gpu.reap.airflow_api import AirflowRefused
from airflow_gpu.reap.resources import Skipped
from airflow_gpu.reap.rules import DEFAULT_GRACE, InstanceState, Resource, TaskTry, orphan_reason


class StateSource(Protocol):
    def task_instance(self, task: TaskTry) -> InstanceState | None:
        """The task instance now; None when Airflow has none."""
        ...


class Backend(Protocol):
    backend: str

    def find(self) -> tuple[list[Resource], list[Skipped]]: ...

    def delete(self, resource: Resource) -> str: ...


@dataclass
class Finding:
    """An orphan, why, and (with ``--delete``) what was done to it."""

    resource: Resource
    why: str
    action: str | None = None


@dataclass
class Report:
    orphans: list[Finding] = field(default_factory=list)
    kept: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.orphans if f.action is not None and f.action.startswith("FAILED")]


def reap(
    backends: Sequence[Backend],
    airflow: StateSource,
    *,
    delete: bool = False,
    grace: timedelta = DEFAULT_GRACE,
    now: datetime | None = None,
) -> Report:
    """Find (and with ``delete``, delete) the orphans among the backends' candidates."""
    report = Report()
    listed: list[tuple[Backend, Resource]] = []
    for backend in backends:
        resources, skipped = backend.find()
        listed += [(backend, r) for r in resources]
        report.skipped += skipped
    now = now or datetime.now(timezone.utc)
    states: dict[tuple[str, str, str, int], InstanceState | str | None] = {}
    for _, resource in listed:
        key = resource.task.instance
        if key not in states:
            try:
                states[key] = airflow.task_instance(resource.task)
            except AirflowRefused as error:
                states[key] = str(error)
    latest: dict[tuple[str, tuple[str, str, str, int]], int] = {}
    for _, r in listed:
        if r.kind == "service":
            continue  # a Service is no work of a try's
        group = (r.backend, r.task.instance)
        latest[group] = max(latest.get(group, 0), r.task.try_number)
    doomed: list[tuple[Backend, Finding]] = []
    for backend, resource in listed:
        state = states[resource.task.instance]
        if isinstance(state, str):
            report.skipped.append(Skipped(resource.backend, resource.kind, resource.name, resource.scope, state))
            continue
        later = latest.get((resource.backend, resource.task.instance), 0) > resource.task.try_number
        why = orphan_reason(resource, state, now=now, grace=grace, later_try_has_work=later)
        if why is None:
            report.kept += 1
        else:
            doomed.append((backend, Finding(resource, why)))
    for backend, finding in doomed:
        if delete:
            finding.action = backend.delete(finding.resource)
        report.orphans.append(finding)
    return report


def render(report: Report, output: str = "table") -> str:
    """The orphans as a table (or JSON), then what was kept and skipped."""
    if output == "json":
        return json.dumps(
            {
                "orphans": [_row_dict(f) for f in report.orphans],
                "kept": report.kept,
                "skipped": [s.__dict__ for s in report.skipped],
            },
            indent=2,
        )
    lines: list[str] = []
    if report.orphans:
        acting = any(f.action is not None for f in report.orphans)
        header = ["BACKEND", "NAME/ID", "NAMESPACE/QUEUE", "DAG", "TASK", "RUN", "MAP", "TRY", "CREATED", "WHY"]
        rows = [header + (["ACTION"] if acting else [])]
        for finding in report.orphans:
            row = _row_dict(finding)
            cells = [str(row[k]) for k in ("backend", "name", "scope", "dag_id", "task_id", "run_id", "map_index",
                                           "try_number", "created", "why")]  # fmt: skip
            rows.append(cells + ([finding.action or "-"] if acting else []))
        lines.append(_table(rows))
    else:
        lines.append("No orphans.")
    lines.append(f"{len(report.orphans)} orphan(s), {report.kept} kept (their task try may still need them)")
    for skipped in report.skipped:
        lines.append(f"skipped {skipped.backend} {skipped.kind} {skipped.scope}/{skipped.name}: {skipped.why}")
    return "\n".join(lines)


def _row_dict(finding: Finding) -> dict[str, object]:
    resource, task = finding.resource, finding.resource.task
    name = resource.name if resource.kind in ("pod", "batch-job") else f"{resource.kind}/{resource.name}"
    if resource.label:
        name = f"{resource.label} ({resource.name})"
    return {
        "backend": resource.backend,
        "kind": resource.kind,
        "name": name,
        "scope": resource.scope,
        "dag_id": task.dag_id,
        "task_id": task.task_id,
        "run_id": task.run_id,
        "map_index": task.map_index,
        "try_number": task.try_number,
        "created": resource.created.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": resource.status,
        "why": finding.why,
        "action": finding.action,
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)

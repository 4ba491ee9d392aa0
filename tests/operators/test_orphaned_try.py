"""Which processes are judged orphaned (``operators/orphaned_try.py``): only a task under a real supervisor
whose parent changed; a run in process (``dag.test()``, ``airflow tasks test``) never. The operator is a
plain object here: ``remember`` and ``orphaned`` read only its ``_supervisor``."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

from airflow_gpu.operators import orphaned_try


def test_a_supervised_task_notes_its_parent_and_an_in_process_one_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    op = SimpleNamespace()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)  # a CommsDecoder, to this code
    orphaned_try.remember(op)
    assert op._supervisor == os.getppid() and not orphaned_try.orphaned(op)
    op._supervisor = os.getppid() + 1  # the parent noted is no longer the parent
    assert orphaned_try.orphaned(op)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object.__new__(InProcessSupervisorComms))
    orphaned_try.remember(op)
    assert op._supervisor is None and not orphaned_try.orphaned(op)
    monkeypatch.delattr(task_runner, "SUPERVISOR_COMMS", raising=False)
    orphaned_try.remember(op)
    assert op._supervisor is None

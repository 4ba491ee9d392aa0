"""``on_kill`` stops a GPU workload only when the task is no longer deferred (``triggers.kill_guard``).

Airflow 3.3 calls ``on_kill`` both for a person's Mark Failed and when a trigger moves to another
triggerer; the task's state tells them apart. The state comes from the supervisor
(``RuntimeTaskInstance.get_task_states``): faked here at that boundary, with the answer's shape
from Airflow's states endpoint (run id -> task id, suffixed ``_<map index>`` when mapped).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

from airflow_gpu.triggers import kill_guard
from airflow_gpu.triggers.batch import GPUBatchJobTrigger


def ti(map_index: int = -1) -> SimpleNamespace:
    return SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=map_index)


def answer(monkeypatch: pytest.MonkeyPatch, states: dict[str, Any] | Exception) -> list[dict[str, Any]]:
    asked: list[dict[str, Any]] = []

    def get_task_states(**query: Any) -> dict[str, Any]:
        asked.append(query)
        if isinstance(states, Exception):
            raise states
        return states

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    return asked


@pytest.mark.parametrize(
    ("map_index", "states", "handed_over"),
    [
        (-1, {"r1": {"train": "deferred"}}, True),  # another triggerer took it over
        (-1, {"r1": {"train": "failed"}}, False),  # Mark Failed
        (-1, {"r1": {"train": None}}, False),  # Clear
        (3, {"r1": {"train_3": "deferred"}}, True),
        (3, {"r1": {"train": "deferred"}}, False),  # another map index's state is not this one's
        (-1, RuntimeError("supervisor gone"), False),  # cannot tell: stop the workload
    ],
)
def test_the_task_state_decides(
    monkeypatch: pytest.MonkeyPatch, map_index: int, states: Any, handed_over: bool
) -> None:
    asked = answer(monkeypatch, states)
    trigger = SimpleNamespace(task_instance=ti(map_index))
    assert asyncio.run(kill_guard.handed_over(trigger)) is handed_over
    assert asked == [{"dag_id": "d", "task_ids": ["train"], "run_ids": ["r1"], "map_index": map_index}]


def test_a_trigger_without_its_task_instance_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = answer(monkeypatch, {})
    assert asyncio.run(kill_guard.handed_over(SimpleNamespace(task_instance=None))) is False
    assert asked == []


@pytest.mark.parametrize(("state", "terminated"), [("deferred", False), ("failed", True)])
def test_the_batch_trigger_terminates_only_on_a_kill(
    monkeypatch: pytest.MonkeyPatch, state: str, terminated: bool
) -> None:
    answer(monkeypatch, {"r1": {"train": state}})
    calls: list[dict[str, Any]] = []
    api = SimpleNamespace(terminate_job=lambda **kwargs: calls.append(kwargs))
    trigger = GPUBatchJobTrigger(job_id="job-1")
    trigger.task_instance = ti()  # type: ignore[assignment]

    async def hook() -> Any:
        return SimpleNamespace(api=api)

    monkeypatch.setattr(trigger, "_hook", hook)
    asyncio.run(trigger.on_kill())
    assert [c["jobId"] for c in calls] == (["job-1"] if terminated else [])

"""``on_kill`` stops a GPU workload only when the task is no longer deferred (``triggers.kill_guard``).

Airflow 3.3 calls ``on_kill`` both for a person's Mark Failed and when a trigger moves to another
triggerer; the task's state tells them apart. The state comes from the supervisor: its channel
(``SUPERVISOR_COMMS``) is faked here, answering ``GetTaskStates`` with a ``TaskStatesResult`` in
the shape of Airflow's states endpoint (run id -> task id, suffixed ``_<map index>`` when mapped).
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

from airflow_gpu.triggers import kill_guard
from airflow_gpu.triggers.batch import GPUBatchJobTrigger


def ti(map_index: int = -1) -> SimpleNamespace:
    return SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=map_index)


class Comms:
    """The trigger runner's channel to its supervisor: ``asend`` in the loop, ``send`` from a thread.
    Records each request and the thread it was made on; answers with ``answers`` in turn."""

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, dict[str, Any], str]] = []

    def _answer(self, how: str, msg: Any) -> Any:
        assert isinstance(msg, GetTaskStates)
        self.asked.append((how, msg.model_dump(exclude={"type"}, exclude_none=True), threading.current_thread().name))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return TaskStatesResult(task_states=answer)

    async def asend(self, msg: Any) -> Any:
        return self._answer("asend", msg)

    def send(self, msg: Any) -> Any:
        return self._answer("send", msg)


def answer(monkeypatch: pytest.MonkeyPatch, *states: dict[str, Any] | Exception) -> Comms:
    comms = Comms(*states)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    monkeypatch.setattr(kill_guard, "RETRY_PAUSE_SECONDS", 0.0)
    return comms


def query(map_index: int) -> dict[str, Any]:
    return {"dag_id": "d", "task_ids": ["train"], "run_ids": ["r1"], "map_index": map_index}


@pytest.mark.parametrize(
    ("map_index", "states", "handed_over"),
    [
        (-1, {"r1": {"train": "deferred"}}, True),  # another triggerer took it over
        (-1, {"r1": {"train": "failed"}}, False),  # Mark Failed
        (-1, {"r1": {"train": None}}, False),  # Clear
        (3, {"r1": {"train_3": "deferred"}}, True),
        (3, {"r1": {"train": "deferred"}}, False),  # another map index's state is not this one's
    ],
)
def test_the_task_state_decides(
    monkeypatch: pytest.MonkeyPatch, map_index: int, states: Any, handed_over: bool
) -> None:
    comms = answer(monkeypatch, states)
    trigger = SimpleNamespace(task_instance=ti(map_index))
    assert asyncio.run(kill_guard.handed_over(trigger)) is handed_over
    assert [(how, asked) for how, asked, _ in comms.asked] == [("asend", query(map_index))]


def test_the_state_is_asked_in_the_event_loop_not_from_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Airflow 3.2 a request from a thread races the loop's own on the supervisor channel and kills
    the trigger runner; on 3.3 it waits for asgiref's one thread-sensitive executor, inside the 30 s
    ``on_kill`` budget. The request goes out on the loop's thread, with ``asend``."""
    comms = answer(monkeypatch, {"r1": {"train": "failed"}})
    assert asyncio.run(kill_guard.handed_over(SimpleNamespace(task_instance=ti()))) is False
    assert [(how, thread) for how, _, thread in comms.asked] == [("asend", threading.main_thread().name)]


def test_a_failed_read_is_asked_again_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor hiccup must not destroy a workload another triggerer follows: one retry."""
    comms = answer(monkeypatch, RuntimeError("supervisor busy"), {"r1": {"train": "deferred"}})
    assert asyncio.run(kill_guard.handed_over(SimpleNamespace(task_instance=ti()))) is True
    assert len(comms.asked) == 2


def test_a_state_that_cannot_be_read_twice_stops_the_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cannot tell: a person's Mark Failed must not leave a GPU running, billed."""
    comms = answer(monkeypatch, RuntimeError("supervisor gone"))
    assert asyncio.run(kill_guard.handed_over(SimpleNamespace(task_instance=ti()))) is False
    assert len(comms.asked) == kill_guard.STATE_READS == 2


def test_a_trigger_without_its_task_instance_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    comms = answer(monkeypatch, {})
    assert asyncio.run(kill_guard.handed_over(SimpleNamespace(task_instance=None))) is False
    assert comms.asked == []


@pytest.mark.parametrize(("state", "terminated"), [("deferred", False), ("failed", True)])
def test_the_batch_trigger_terminates_only_on_a_kill(
    monkeypatch: pytest.MonkeyPatch, state: str, terminated: bool
) -> None:
    answer(monkeypatch, {"r1": {"train": state}})
    calls: list[dict[str, Any]] = []
    trigger = GPUBatchJobTrigger(job_id="job-1")
    trigger.task_instance = ti()  # type: ignore[assignment]

    async def hook() -> Any:  # ``GPUBatchHook.terminate``: TerminateJob through transient errors
        return SimpleNamespace(terminate=lambda job_id, reason: calls.append({"jobId": job_id, "reason": reason}))

    monkeypatch.setattr(trigger, "_hook", hook)
    asyncio.run(trigger.on_kill())
    assert [c["jobId"] for c in calls] == (["job-1"] if terminated else [])


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ([{"r1": {"train": "deferred"}}], True),  # a triggerer restart: the pod stays
        ([{"r1": {"train": "failed"}}], False),  # Mark Failed
        ([RuntimeError("supervisor gone"), RuntimeError("supervisor gone")], None),  # cannot tell
    ],
)
def test_still_deferred_reads_in_the_loop_and_says_when_it_cannot_tell(
    monkeypatch: pytest.MonkeyPatch, answers: list[Any], expected: bool | None
) -> None:
    """Before Airflow 3.3 ``cleanup`` decides with this read on every trigger exit, a triggerer's
    shutdown included: "cannot tell" is its own answer (the caller keeps the workload), and the read
    is made with ``asend`` on the loop's thread."""
    comms = answer(monkeypatch, *answers)
    trigger = SimpleNamespace(task_instance=ti())
    assert asyncio.run(kill_guard.still_deferred(trigger)) is expected
    assert {(how, thread) for how, _, thread in comms.asked} == {("asend", threading.main_thread().name)}


def test_a_read_that_never_answers_ends_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor that does not answer (going away at shutdown) cannot hold a cleanup for ever."""

    class Silent(Comms):
        async def asend(self, msg: Any) -> Any:
            await asyncio.sleep(3600)

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Silent({}), raising=False)
    monkeypatch.setattr(kill_guard, "RETRY_PAUSE_SECONDS", 0.0)
    monkeypatch.setattr(kill_guard, "READ_TIMEOUT_SECONDS", 0.1)
    trigger = SimpleNamespace(task_instance=ti())
    assert asyncio.run(asyncio.wait_for(kill_guard.still_deferred(trigger), 5)) is None

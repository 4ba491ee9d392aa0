"""A request of ours to the triggerer's supervisor, cut short, leaves the channel in order.

Airflow 3.2.0's ``TriggerCommsDecoder.asend`` writes a request frame and reads the next frame off
the channel as its answer, both under one lock: a request cancelled in between (the runner
cancelling a removed trigger, an ``asyncio.wait_for`` timing out) left its answer on the channel,
the next request read it, ``_aget_response`` raised "Response read out of order!", and the trigger
runner process died with every trigger in it (the floor end-to-end run). These tests build the
real ``TriggerCommsDecoder`` of the installed Airflow (3.2 in ``.venv-floor``, 3.3 in ``.venv``)
over a socket pair, with a supervisor at the other end that answers each request in turn, slowly,
as the real one does (``send_msg``: a length-prefixed ``_ResponseFrame`` carrying the request's
id), cut one of our requests short, and check that the runner's next request gets its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import (
    ConnectionResult,
    GetTaskStates,
    TaskStatesResult,
    _RequestFrame,
    _ResponseFrame,
)

from airflow_gpu.hooks import batch as batch_hook
from airflow_gpu.triggers import cluster, kill_guard

#: Seconds the supervisor takes to answer each request (it answers one at a time, in order).
ANSWER_DELAY = 0.3


class Supervisor:
    """The supervisor's end of the trigger runner's channel: reads each request frame, answers it
    ``ANSWER_DELAY`` later with what names that request (a task state under the asked run id, a
    connection of the asked id), one at a time, as ``TriggerRunnerSupervisor`` does."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received: list[tuple[int, str]] = []
        self.asked = asyncio.Event()

    async def serve(self) -> None:
        reader, writer = await asyncio.open_connection(sock=self.sock)
        decoder = msgspec.msgpack.Decoder(_RequestFrame)
        while True:
            try:
                length = int.from_bytes(await reader.readexactly(4), "big")
                request = decoder.decode(await reader.readexactly(length))
            except asyncio.IncompleteReadError:
                return
            body = request.body or {}
            self.received.append((request.id, body["type"]))
            self.asked.set()
            await asyncio.sleep(ANSWER_DELAY)
            writer.write(_ResponseFrame(id=request.id, body=self.answer(body)).as_bytes())
            await writer.drain()

    @staticmethod
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body["type"] == "GetTaskStates":
            states = {run_id: {task_id: "deferred" for task_id in body["task_ids"]} for run_id in body["run_ids"]}
            return TaskStatesResult(task_states=states).model_dump()
        if body["type"] == "GetConnection":
            fields = dict.fromkeys(("host", "schema", "login", "password", "port"))
            conn = ConnectionResult.model_validate(
                {"conn_id": body["conn_id"], "conn_type": "kubernetes", "extra": json.dumps({"k": 1}), **fields}
            )
            return conn.model_dump(exclude_unset=True, by_alias=True)  # as the triggerer's supervisor sends it
        raise AssertionError(f"unexpected request {body}")


@contextlib.asynccontextmanager
async def channel(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Any, Supervisor]]:
    """The real ``TriggerCommsDecoder`` as ``SUPERVISOR_COMMS``, its supervisor on the other end."""
    from airflow.jobs.triggerer_job_runner import TriggerCommsDecoder

    ours, theirs = socket.socketpair()
    supervisor = Supervisor(theirs)
    serving = asyncio.create_task(supervisor.serve())
    reader, writer = await asyncio.open_connection(sock=ours)
    comms = TriggerCommsDecoder(async_writer=writer, async_reader=reader, socket=ours)
    if hasattr(comms, "start_reader"):  # Airflow 3.3: one reader task hands each answer to its request
        await comms.start_reader()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    try:
        yield comms, supervisor
    finally:
        writer.close()
        if serving.done():  # the supervisor itself failed: say why, not only that an answer never came
            serving.result()
        reader_task = getattr(comms, "_reader_task", None)
        for task in (serving, reader_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        theirs.close()


async def runner_request(comms: Any, run_id: str = "runner-sync") -> dict[str, Any]:
    """The runner's next request on the channel (as its own ``sync_state_to_supervisor`` would make):
    what it reads must be its own answer, the state under its run id."""
    answer = await asyncio.wait_for(
        comms.asend(GetTaskStates(dag_id="d", task_ids=["t"], run_ids=[run_id])), 10 * ANSWER_DELAY
    )
    assert isinstance(answer, TaskStatesResult)
    return answer.task_states


def test_a_state_read_that_times_out_leaves_the_next_request_its_own_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kill_guard.still_deferred`` bounds each read with ``asyncio.wait_for``: a supervisor slower
    than that bound (seen in the floor run: two 10 s timeouts, then the runner died) must only end our
    wait; the request still reads its own answer, and the runner's next request reads its own."""
    monkeypatch.setattr(kill_guard, "READ_TIMEOUT_SECONDS", ANSWER_DELAY / 3)
    monkeypatch.setattr(kill_guard, "RETRY_PAUSE_SECONDS", 0.0)
    trigger = SimpleNamespace(task_instance=SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=-1))

    async def scenario() -> None:
        async with channel(monkeypatch) as (comms, supervisor):
            started = time.monotonic()
            assert await kill_guard.still_deferred(trigger) is None  # both reads timed out: cannot tell
            assert time.monotonic() - started < ANSWER_DELAY  # the bound still holds: our wait ended
            assert await runner_request(comms) == {"runner-sync": {"t": "deferred"}}
            assert [kind for _, kind in supervisor.received] == ["GetTaskStates"] * 3

    asyncio.run(scenario())


async def _pod_connection() -> None:
    await cluster.ClusterConnection(kubernetes_conn_id="k8s_cancelled").prefetch()


async def _batch_connection() -> None:
    await batch_hook.GPUBatchHook.for_trigger("aws_cancelled", "us-east-1")


@pytest.mark.parametrize("read", [_pod_connection, _batch_connection], ids=["pod-trigger", "batch-trigger"])
def test_a_trigger_cancelled_while_reading_its_connection_leaves_the_next_request_its_own_answer(
    monkeypatch: pytest.MonkeyPatch, read: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """The runner cancels a removed trigger wherever it waits (``cancel_triggers``), and the pod
    triggers' watch waits under ``asyncio.wait_for``: a connection read (``aget_connection``, which
    asks the supervisor) in flight at that moment must not leave its answer to the next request."""
    monkeypatch.setattr(cluster, "_EXTRAS", {})
    monkeypatch.setattr(batch_hook, "_LAST_READ", {})

    async def scenario() -> None:
        async with channel(monkeypatch) as (comms, supervisor):
            trigger = asyncio.create_task(read())
            await asyncio.wait_for(supervisor.asked.wait(), 5)  # the request is written, its answer not read
            trigger.cancel()  # as ``TriggerRunner.cancel_triggers`` does
            with pytest.raises(asyncio.CancelledError):
                await trigger
            assert await runner_request(comms) == {"runner-sync": {"t": "deferred"}}
            assert [kind for _, kind in supervisor.received] == ["GetConnection", "GetTaskStates"]

    asyncio.run(scenario())

"""Which processes are judged orphaned (``operators/orphaned_try.py``): only a task under a real supervisor
whose parent changed; a run in process (``dag.test()``, ``airflow tasks test``) never. The operator is a
plain object here: ``remember`` and ``orphaned`` read only its ``_supervisor``."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

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


def test_a_task_whose_supervisor_died_before_it_noted_one_is_orphaned_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reparented to init (pid 1) already when the try starts or resumes: the worker was killed in the process's
    first moments (the twenty-fourth soak, a resume's first second). Noting init as the supervisor would never
    judge it orphaned, and it would read its pod's success, fail to record it and delete the pod."""
    op = SimpleNamespace()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object(), raising=False)
    monkeypatch.setattr(orphaned_try.os, "getppid", lambda: 1)
    monkeypatch.setattr(orphaned_try, "_airflow_is_init", lambda: False)  # pid 1 is an init (tini, systemd)
    orphaned_try.remember(op)
    assert orphaned_try.orphaned(op)
    # Airflow as pid 1 (a KubernetesExecutor pod with no init) is the supervisor itself: not orphaned
    monkeypatch.setattr(orphaned_try, "_airflow_is_init", lambda: True)
    orphaned_try.remember(op)
    assert not orphaned_try.orphaned(op)


def test_the_patience_covers_airflow_s_longest_wait_for_the_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeat timeout, its detection interval, the retry delay Airflow may wait at most
    (``TaskInstance.next_retry_datetime``: with backoff up to twice ``delay * m ** (try - 1)``, within
    ``max_retry_delay``), and the margin; ``[gpu] orphaned_try_patience_seconds`` sets it outright."""
    from datetime import timedelta

    from tests.operators.task_context import Ti

    monkeypatch.delenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", raising=False)
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "300")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL", "10")
    plain = SimpleNamespace(retry_delay=timedelta(seconds=300), retry_exponential_backoff=0, max_retry_delay=None)
    assert orphaned_try.patience(plain, {"ti": Ti(1)}) == 300 + 10 + 300 + orphaned_try.MARGIN_SECONDS
    backoff = SimpleNamespace(retry_delay=timedelta(seconds=300), retry_exponential_backoff=2.0, max_retry_delay=None)
    assert orphaned_try.retry_delay_bound(backoff, {"ti": Ti(1)}) == 600  # try 1: between 300 and 600 s
    assert orphaned_try.retry_delay_bound(backoff, {"ti": Ti(3)}) == 2400  # try 3: between 1200 and 2400 s
    backoff.max_retry_delay = timedelta(minutes=15)
    assert orphaned_try.retry_delay_bound(backoff, {"ti": Ti(3)}) == 900
    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "42")
    assert orphaned_try.patience(backoff, {"ti": Ti(3)}) == 42


def test_the_mark_is_the_try_s_so_a_resumed_process_of_the_same_try_knows_its_own() -> None:
    """Airflow 3 gives each try its own task instance id; two processes of one try (the resume after a
    deferral) write the same mark, and only a mark of another try counts as a take-over."""
    first, resumed, retry = SimpleNamespace(), SimpleNamespace(), SimpleNamespace()
    for op, ti_id in ((first, "0195-a"), (resumed, "0195-a"), (retry, "0195-b")):
        orphaned_try.remember(op, {"ti": SimpleNamespace(id=ti_id)})
    mark = orphaned_try.take_over_mark(resumed)["metadata"]
    assert not orphaned_try.taken_by_another(first, mark)
    assert orphaned_try.taken_by_another(first, orphaned_try.take_over_mark(retry)["metadata"])
    assert not orphaned_try.taken_by_another(first, {"annotations": {}})


@pytest.mark.parametrize(
    ("reads", "done", "deleted"),
    [
        (["Running"], "left running", False),  # then every look fails: it ran when last read, the reaper's
        (["Pending"], "deleted", True),  # then every look fails: it never started when last read
        ([], "deleted", True),  # nothing ever read: nothing known to run
        (["Pending", "Running"], "left running", False),
    ],
)
def test_a_lingering_orphan_decides_on_the_last_state_it_read(
    monkeypatch: pytest.MonkeyPatch, reads: list[str], done: str, deleted: bool
) -> None:
    """``linger`` past its patience: looks that fail (the API down, a half-open connection) do not erase what
    the last one read, so work seen running is never deleted for a failed look. The looks are a function given
    here (the boundary ``linger`` owns), the clock the real one with a patience of 0.2 s."""
    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "0.2")
    monkeypatch.setattr(orphaned_try, "LOOK_SECONDS", 0.01)
    answers = iter(reads)
    calls: list[str] = []

    def look() -> dict[str, object]:
        phase = next(answers, None)
        if phase is None:
            raise ConnectionResetError("the API is down")
        return {"metadata": {}, "status": {"phase": phase}}

    op = SimpleNamespace(_taker="this-try")
    said = orphaned_try.linger(
        op, {}, look, lambda work: True, lambda: calls.append("delete"),
        started=lambda work: work["status"]["phase"] != "Pending",  # type: ignore[index]
    )  # fmt: skip
    assert said == done and (calls == ["delete"]) is deleted


def test_a_followed_silent_log_ends_within_seconds_once_the_try_is_orphaned(kubernetes_emulator: Any) -> None:
    """KPO follows a pod's log with a five-minute read timeout and reads the pod again only between chunks of
    output or once that read times out: a try orphaned while its pod is silent would go on for minutes. The watch
    beside the read (``WatchedLogs``) shuts it, and KPO's next read of the pod raises ``OrphanedTry``. Real
    parts: the Kubernetes emulator over HTTP, the unmodified client, KPO's ``fetch_container_logs``; the
    supervisor's death is the one thing played (``stop`` raises once a flag is set)."""
    import threading

    from kubernetes import client, config
    from kubernetes.client import models as k8s

    from airflow_gpu.operators.kubernetes_reads import RetryingPodManager
    from airflow_gpu.testing.polling import wait_for

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="silent", namespace="default"),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(
            name="base", image="python:3.12-slim", command=["sh", "-c", "echo one; echo two; sleep 600"],
        )]),
    )  # fmt: skip
    pod = api.create_namespaced_pod("default", body)
    wait_for(lambda: api.read_namespaced_pod("silent", "default").status.phase == "Running", 60, "the pod running")
    gone = threading.Event()

    def stop() -> None:
        if gone.is_set():
            raise orphaned_try.OrphanedTry()

    manager = RetryingPodManager(kube_client=api, stop=stop)
    ended: list[BaseException | None] = []

    def follow() -> None:
        try:
            manager.fetch_container_logs(pod, "base", follow=True)
            ended.append(None)
        except BaseException as error:
            ended.append(error)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        # KPO logs a line once the next one comes: "one" is logged once "two" is read, and then the pod is silent
        wait_for(lambda: manager.container_log_times, 60, "the log followed")
        gone.set()
        # the watch looks every second; the bound is far below KPO's five-minute read, with room for a loaded machine
        follower.join(60)
        assert not follower.is_alive(), "the follow went on past the orphaning"
        assert isinstance(ended[0], orphaned_try.OrphanedTry)
    finally:
        api.delete_namespaced_pod("silent", "default", grace_period_seconds=0)

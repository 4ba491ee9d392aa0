"""The soak's reclaim kinds at each phase of a pod (``airflow_gpu.testing.soak.faults``), on the
Kubernetes emulator alone (no Airflow): the seeded schedule draws each of them, and each one acts
on the pod it aims at as a spot reclaim at that phase shows on a cluster.

The pods carry the operator's marks (the ``airflow-gpu/accelerator`` label, the task-instance
annotation) so that the soak's observer follows them, as it follows the operator's pods.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.testing.soak import faults, invariants
from airflow_gpu.testing.soak.faults import KINDS, NOT_IMPLEMENTED, RESULT_MARKER, Context, Fault, Injector
from airflow_gpu.testing.soak.observer import Observer
from airflow_gpu.utils.pod_identity import TASK_ANNOTATION

NEW_KINDS = ("k8s_reclaim_pulling", "k8s_reclaim_after_result", "k8s_reclaim_after_success")
KEY = ("soak_fanout_kubernetes", "score_shard", "manual__1", 3, 1)


class NoBatch:
    """The observer reads Batch jobs too; these tests have no Batch emulator, so it has none."""

    def jobs(self) -> list[Any]:
        return []


@pytest.fixture
def soak(kubernetes_emulator: KubernetesEmulator) -> Iterator[tuple[Injector, client.CoreV1Api]]:
    observer = Observer(kubernetes_emulator, NoBatch()).start()
    context = Context(None, kubernetes_emulator, NoBatch(), None, None, observer)
    injector = Injector(7, 1, 1.0, context, lambda _: None)
    core = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    try:
        yield injector, core
    finally:
        injector.stop.set()
        observer.close()


def shard_pod(core: client.CoreV1Api, name: str, script: str) -> None:
    """A pod as the operator makes it (its marks), running ``script``."""
    annotation = json.dumps(dict(zip(("dag_id", "task_id", "run_id", "map_index", "try_number"), KEY, strict=True)))
    core.create_namespaced_pod("default", {
        "metadata": {"name": name, "labels": {"airflow-gpu/accelerator": "h100"},
                     "annotations": {TASK_ANNOTATION: annotation}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "base", "image": "python:3.12-slim",
                                 "command": [sys.executable, "-c", script]}]},
    })  # fmt: skip


def apply(injector: Injector, kind: str) -> tuple[Fault, threading.Thread]:
    """Apply one fault of ``kind`` in its own thread, as the injector does."""
    fault = Fault(1, 0.0, kind)
    worker = threading.Thread(target=injector._apply, args=(fault, random.Random(1)), daemon=True)
    worker.start()
    return fault, worker


def events(core: client.CoreV1Api, name: str) -> list[str]:
    return [e.reason for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items]


def test_the_seeded_schedule_draws_every_phase_of_reclaim_and_replays_it() -> None:
    assert set(NEW_KINDS) <= set(KINDS) and not NOT_IMPLEMENTED

    def kinds(seed: int, each: int = 0) -> list[str]:
        injector = Injector(seed, 300, 60.0, None, lambda _: None, each=each)  # type: ignore[arg-type]
        return [kind for _, kind, _ in injector.draws()]

    drawn = kinds(26)
    assert all(kind in drawn for kind in NEW_KINDS), {k: drawn.count(k) for k in NEW_KINDS}
    assert kinds(26) == drawn and kinds(27) != drawn  # a seed replays its schedule; another does not
    sliced = kinds(2611, each=2)
    assert all(sliced.count(kind) == 2 for kind in KINDS)


def test_a_reclaim_while_the_image_pulls_stops_a_pod_that_never_ran(soak: Any) -> None:
    injector, core = soak
    fault, worker = apply(injector, "k8s_reclaim_pulling")
    shard_pod(core, "pulling", f"print('{RESULT_MARKER}1', flush=True)")
    worker.join(30)
    assert fault.outcome == "injected" and fault.target == "pulling" and fault.key == KEY, fault
    pod = core.read_namespaced_pod("pulling", "default")
    assert pod.status.phase == "Failed", pod.status
    assert any(c.type == "DisruptionTarget" and c.reason == "TerminationByKubelet" for c in pod.status.conditions)
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    seen = events(core, "pulling")
    assert "Pulling" in seen and "Pulled" not in seen and "Started" not in seen, seen
    history = next(w for w in injector.context.observer.workloads() if w.name == "pulling")
    assert "Running" not in [phase for _, phase in history.statuses] and fault.pod_outcome == "Failed"
    assert invariants.interrupting(fault)


def test_a_slow_pull_pulls_then_runs_and_says_so(kubernetes_emulator: KubernetesEmulator) -> None:
    core = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    kubernetes_emulator.slow_pulls(1.0, times=1)
    shard_pod(core, "slow", "print('done')")
    wait_for(lambda: kubernetes_emulator.pulling() == ["slow"], 10)
    assert core.read_namespaced_pod("slow", "default").status.phase == "Pending"
    wait_for(lambda: core.read_namespaced_pod("slow", "default").status.phase == "Succeeded", 20)
    pulled = [e.message for e in core.list_namespaced_event("default").items if e.reason == "Pulled"]
    assert len(pulled) == 1 and pulled[0].startswith('Successfully pulled image "python:3.12-slim" in 1.000s'), pulled
    shard_pod(core, "cached", "print('done')")  # the armed pull was spent: the next pod's image is there
    wait_for(lambda: core.read_namespaced_pod("cached", "default").status.phase == "Succeeded", 20)
    assert kubernetes_emulator.pulling() == []


def test_a_reclaim_after_the_result_line_stops_the_pod_before_it_exits(soak: Any) -> None:
    injector, core = soak
    shard_pod(core, "printed", f"import time; print('{RESULT_MARKER}1', flush=True); time.sleep(30)")
    fault, worker = apply(injector, "k8s_reclaim_after_result")
    worker.join(30)
    assert fault.outcome == "injected" and fault.target == "printed", fault
    log = core.read_namespaced_pod_log("printed", "default")
    pod = core.read_namespaced_pod("printed", "default")
    assert RESULT_MARKER in log and pod.status.phase == "Failed" and fault.pod_outcome == "Failed"
    assert invariants.interrupting(fault)  # a preemption: the task must run it again


def test_a_pod_that_exited_before_its_reclaim_stays_succeeded(soak: Any) -> None:
    injector, core = soak
    shard_pod(core, "quick", f"print('{RESULT_MARKER}1', flush=True)")
    wait_for(lambda: core.read_namespaced_pod("quick", "default").status.phase == "Succeeded", 20)
    pod = next(w for w in injector.context.observer.workloads() if w.name == "quick")
    fault = Fault(1, 0.0, "k8s_reclaim_after_result")
    injector._preempt(fault, pod)  # a node shutdown stops running pods; an ended one keeps its status
    assert core.read_namespaced_pod("quick", "default").status.phase == "Succeeded"
    assert fault.pod_outcome == "Succeeded" and not invariants.interrupting(fault)


def test_a_reclaim_after_success_deletes_the_completed_pod_its_task_still_reads(soak: Any) -> None:
    injector, core = soak
    fault, worker = apply(injector, "k8s_reclaim_after_success")
    shard_pod(core, "done", f"print('{RESULT_MARKER}1', flush=True)")
    worker.join(30)
    assert fault.outcome == "injected" and fault.target == "done" and fault.pod_outcome == "Succeeded", fault
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("done", "default")
    assert gone.value.status == 404
    gc = [f for f in injector.context.kubernetes.faults if f["fault"] == "pod_gc"]
    assert gc and gc[0]["pod"] == "done" and gc[0]["phase"] == "Succeeded"
    assert not invariants.interrupting(fault)


def test_a_completed_pod_its_task_already_deleted_is_no_target(soak: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    injector, core = soak
    monkeypatch.setattr(faults, "AIM_SECONDS", 1.0)
    shard_pod(core, "read", "print('done')")
    wait_for(lambda: core.read_namespaced_pod("read", "default").status.phase == "Succeeded", 20)
    core.delete_namespaced_pod("read", "default")  # its task read it and deleted it
    wait_for(lambda: not core.list_namespaced_pod("default").items, 20)
    fault, worker = apply(injector, "k8s_reclaim_after_success")
    worker.join(30)
    assert fault.outcome == "skipped", fault


class JustStarted:
    """An observer that has not polled Batch yet: the job the reclaim finds is in no history."""

    jobs: dict[str, Any] = {}


def test_a_batch_reclaim_names_the_try_of_a_job_the_observer_has_not_seen_yet(aws_default_connection: Any) -> None:
    """The sixth soak counted a Batch training's first reclaim for no try (the observer, which polls, had not
    listed the job yet) and judged its three recorded interruptions against two reclaims. The job's tags
    name the try, as the operator wrote them."""
    from tests.operators.task_context import Store, Ti
    from tests.operators.test_batch_operator_runs import operator

    emulator = aws_default_connection
    op = operator(command=[sys.executable, "-c", "import time; time.sleep(60)"])  # the workload runs on
    op.submit_job({"ti": Ti(), "task_state_store": Store()})  # type: ignore[arg-type]
    job = emulator._job(str(op.job_id))
    wait_for(lambda: job.status == "RUNNING", timeout=60, what="the job to run")
    context = Context(None, None, emulator, None, None, JustStarted())  # type: ignore[arg-type]
    fault = Fault(1, 0.0, "batch_reclaim")
    Injector(7, 1, 1.0, context, lambda _: None)._batch_reclaim(fault, random.Random(1))
    assert fault.target == job.job_id and fault.key == ("gpu_dag", "train", "manual__1", -1, 1)


def test_a_second_batch_reclaim_spares_the_attempt_a_first_one_is_stopping(aws_default_connection: Any) -> None:
    """The seventh soak judged a Batch training's one recorded interruption against two reclaims: the second
    found the attempt the first was stopping still RUNNING (its workload within the stop timeout) and reclaimed
    it again, which ends it once. Such an attempt is no target; the next attempt is."""
    from tests.operators.task_context import Store, Ti
    from tests.operators.test_batch_operator_runs import operator

    emulator = aws_default_connection
    slow_to_stop = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    op = operator(command=[sys.executable, "-c", slow_to_stop])  # stays RUNNING for the stop timeout (5 s)
    op.submit_job({"ti": Ti(), "task_state_store": Store()})  # type: ignore[arg-type]
    job = emulator._job(str(op.job_id))
    wait_for(lambda: job.status == "RUNNING", timeout=60, what="the job to run")
    context = Context(None, None, emulator, None, None, JustStarted())  # type: ignore[arg-type]
    injector = Injector(7, 2, 1.0, context, lambda _: None)
    injector._wait_for = lambda find, *args, **kwargs: find()  # type: ignore[method-assign]  # one look each
    first, second = Fault(1, 0.0, "batch_reclaim"), Fault(2, 0.1, "batch_reclaim")
    injector._batch_reclaim(first, random.Random(1))
    injector._batch_reclaim(second, random.Random(1))
    assert first.target == job.job_id and first.outcome != "skipped"
    assert job.status == "RUNNING" and second.outcome == "skipped"
    emulator.client("batch").terminate_job(jobId=job.job_id, reason="test over")


def test_a_node_loss_fails_a_running_child_node_of_a_multi_node_job_and_records_how_the_job_ended(
    aws_default_connection: Any, tmp_path: Any
) -> None:
    """The two-machine Batch training runs on on-demand hosts, which a spot reclaim never meets; their host can
    still fail. The fault fails a RUNNING child node's host (Batch fails that node alone), names the task try,
    and records what the job then ended as: here its main node fails once its peer is gone, as a training's
    does (told by a file the test writes when node 1 has failed)."""
    import threading

    from airflow_gpu.operators.accelerate_batch import MultiNodeBatchOperator
    from tests.operators.task_context import Store, Ti

    emulator, gone = aws_default_connection, tmp_path / "gone"
    # The workload, not a wait of the test's: the main node polls for the file the test writes once node 1 failed
    # (its lost peer), then exits 1; node 1 runs until its host is lost.
    nodes = (
        "import os, sys, time\n"
        "while os.environ['AWS_BATCH_JOB_NODE_INDEX'] == '0' and not os.path.exists(sys.argv[1]): time.sleep(0.1)\n"
        "sys.exit(1) if os.environ['AWS_BATCH_JOB_NODE_INDEX'] == '0' else time.sleep(60)\n"
    )
    op = MultiNodeBatchOperator(
        task_id="train", accelerator="A10G:1", job_queue="gpu-on-demand", gpu_profile=False, poll_interval=0.2,
        command=[sys.executable, "-c", nodes, str(gone)],
    )  # fmt: skip
    op.num_nodes = 2
    op.submit_job({"ti": Ti(), "task_state_store": Store()})  # type: ignore[arg-type]
    job = emulator._job(str(op.job_id))
    wait_for(lambda: 1 in job.nodes and job.nodes[1].status == "RUNNING", timeout=60, what="node 1 to run")
    told = threading.Thread(
        target=lambda: (wait_for(lambda: job.nodes[1].status == "FAILED", timeout=60), gone.touch()), daemon=True
    )
    told.start()
    context = Context(None, None, emulator, None, None, JustStarted())  # type: ignore[arg-type]
    fault = Fault(1, 0.0, "batch_node_loss")
    Injector(7, 1, 1.0, context, lambda _: None)._batch_node_loss(fault, random.Random(1))
    assert fault.target == f"{job.job_id}#1" and fault.key == ("gpu_dag", "train", "manual__1", -1, 1)
    assert fault.pod_outcome == "FAILED" and job.nodes[1].status == "FAILED"
    node = emulator.client("batch").describe_jobs(jobs=[fault.target])["jobs"][0]
    assert node["attempts"][-1]["statusReason"].startswith("Host EC2")  # the documented reclaim reason


@pytest.mark.parametrize("late", [0.0, 1.0])
def test_every_fault_of_the_schedule_falls_inside_the_window(late: float) -> None:
    """The slice (44 faults over 120 s) lost its last fault: one interval before each put the last one exactly
    at the window's end, where the runner stops the injector. Run beside the suite, it lost it again: each
    wait woke late, and the lateness added up. Each fault is due at its own moment from the start now. The
    clock is one given here; a wait moves it on by what was asked and ``late`` seconds more."""
    clock = [1000.0]

    class Recorded:
        def __init__(self) -> None:
            self.moments: list[float] = []

        def wait(self, seconds: float) -> bool:  # Event.wait's answer: False, not stopped
            clock[0] += seconds + late
            self.moments.append(clock[0] - 1000.0)
            return False

        def set(self) -> None:
            pass

    injector = Injector(2611, 0, 120.0, None, lambda _: None, each=2)  # type: ignore[arg-type]
    injector.clock = lambda: clock[0]
    injector.stop = Recorded()  # type: ignore[assignment]
    injector._apply = lambda fault, rng: None  # type: ignore[method-assign]
    injector.run()
    moments = injector.stop.moments  # type: ignore[attr-defined]
    assert len(injector.faults) == len(moments) == 2 * len(KINDS)
    interval = 120.0 / (2 * len(KINDS) + 1)
    assert all(abs(m - (n + 1) * interval - late) < 1e-6 for n, m in enumerate(moments))  # not late by n x late
    assert moments[-1] < 120.0  # the last one before the window's end


def test_in_the_slice_a_fault_that_found_no_target_aims_again_until_its_kind_is_applied() -> None:
    """``each`` (the slice): the Pending-pod and Batch reclaims found no target either time they were drawn, so
    those kinds proved nothing. Such a fault now aims again while the window lasts, until its kind has been
    applied once; the full soak's draws (no ``each``) stay as drawn. The aims are a method given here."""

    class NoWait:
        def wait(self, seconds: float) -> bool:
            return False

    aims: list[int] = []

    def aim(injector: Injector, fault: Fault, rng: random.Random) -> None:
        aims.append(fault.number)
        if len(aims) < 3:
            fault.outcome = "skipped"  # no target yet
        else:
            fault.target = "found"

    slice_ = Injector(2611, 0, 120.0, None, lambda _: None, each=1)  # type: ignore[arg-type]
    slice_.stop = NoWait()  # type: ignore[assignment]
    fault = Fault(1, 0.0, "batch_reclaim")
    slice_.faults.append(fault)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Injector, "_batch_reclaim", aim)
        slice_._apply(fault, random.Random(1))
        assert (fault.outcome, fault.target, aims) == ("injected", "found", [1, 1, 1])
        aims.clear()
        second = Fault(2, 0.0, "batch_reclaim")  # its kind was applied: a skip is final
        slice_.faults.append(second)
        patch.setattr(Injector, "_batch_reclaim", lambda self, f, rng: setattr(f, "outcome", "skipped"))
        slice_._apply(second, random.Random(1))
        assert second.outcome == "skipped"
        soak = Injector(2611, 10, 120.0, None, lambda _: None)  # type: ignore[arg-type]
        drawn = Fault(1, 0.0, "batch_reclaim")
        soak._apply(drawn, random.Random(1))
        assert drawn.outcome == "skipped"  # drawn once, as drawn


def test_the_slice_knows_which_kinds_are_not_applied_yet_and_the_full_soak_has_none() -> None:
    """The runner keeps the slice's window open past its end (``runner.OVERTIME_SECONDS``) while a kind has not
    been applied: beside the suite the Batch reclaims, drawn late, twice found no training on spot."""
    slice_ = Injector(2611, 0, 120.0, None, lambda _: None, each=1)  # type: ignore[arg-type]
    assert slice_.unapplied() == set(KINDS)
    aimed = {"batch_reclaim": "skipped", "redis_restart": "injected"}

    def aim(injector: Injector, fault: Fault, rng: random.Random) -> None:
        fault.outcome = aimed[fault.kind]

    class Stopped:
        def wait(self, seconds: float) -> bool:
            return True  # the window is over: no aiming again

    slice_.stop = Stopped()  # type: ignore[assignment]
    with pytest.MonkeyPatch.context() as patch:
        for kind in aimed:
            patch.setattr(Injector, f"_{kind}", aim)
        for number, kind in enumerate(aimed, 1):
            slice_._apply(Fault(number, 0.0, kind), random.Random(1))
    assert slice_.unapplied() == set(KINDS) - {"redis_restart"}
    full = Injector(2611, 300, 60.0, None, lambda _: None)  # type: ignore[arg-type]
    assert full.unapplied() == set()

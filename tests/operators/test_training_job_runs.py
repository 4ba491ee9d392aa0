"""A Kubernetes training over two machines, run by ``AccelerateTrainOperator`` against the emulator.

The machines are simulated containers (``simulated.local/...`` images: no process, a scripted run
and output, a signal ends them), so each run takes seconds; the Jobs, their controller, the
preemption and the API are the emulator's. Covered: a new try taking over an earlier try's Job (or
deleting it), and a deferred training carried through a reclaim by its trigger, the worker resuming
once. The real ``accelerate launch`` runs of the same paths are in ``tests/e2e``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.operators.accelerate import AccelerateTrainOperator
from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD, STATE_STORE_KEY, IndexedJobTraining
from airflow_gpu.operators.spot_task import save_run
from airflow_gpu.operators.training_job_logs import MachineLogs
from airflow_gpu.operators.training_job_reattach import take_over
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.end_hold import END_HOLD
from airflow_gpu.utils.training_job import JOB_LABEL
from tests.kubernetes_history import JobHistory
from tests.operators.task_context import Store, Ti
from tests.operators.test_accelerate_operator import SCRIPT

# slow: imports cncf-kubernetes' operator and triggers (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

INDEX = "batch.kubernetes.io/job-completion-index"
RESULT = '::airflow-gpu-result::{"loss": 0.25}'
LOG = logging.getLogger(__name__)


def context(
    try_number: int = 1, store: Store | None = None, run_id: str = "manual__1", max_tries: int = 0
) -> dict[str, Any]:
    return {"ti": Ti(try_number, dag_id="training_dag", run_id=run_id, max_tries=max_tries), "run_id": run_id,
            "dag": None,
            "task_state_store": store if store is not None else Store()}  # fmt: skip


def training(seconds: float = 600, **kwargs: Any) -> AccelerateTrainOperator:
    """Two L4 machines whose containers run ``seconds``, then print the result line on each rank."""
    return AccelerateTrainOperator(
        task_id="train", training_script=SCRIPT, target="kubernetes", accelerator="L4", num_machines=2,
        image="simulated.local/train:1", gpu_profile=False, namespace="default", poll_interval=0.2,
        env={"SIMULATED_SECONDS": str(seconds), "SIMULATED_OUTPUT": f"training\n{RESULT}"}, **kwargs,
    )  # fmt: skip


def runner(op: AccelerateTrainOperator, ctx: dict[str, Any]) -> IndexedJobTraining:
    run = op._make_runner(op.launch)
    assert isinstance(run, IndexedJobTraining)
    run._start(ctx)  # type: ignore[arg-type]
    return run


def apis(emulator: KubernetesEmulator) -> tuple[client.BatchV1Api, client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(emulator.kubeconfig_path))
    return client.BatchV1Api(api), client.CoreV1Api(api)


def jobs(emulator: KubernetesEmulator) -> list[str]:
    return sorted(j.metadata.name for j in apis(emulator)[0].list_namespaced_job("default").items)


def running_rank(emulator: KubernetesEmulator, job: str, rank: int) -> str:
    core = apis(emulator)[1]

    def found() -> str | None:
        pods = core.list_namespaced_pod("default", label_selector=f"{JOB_LABEL}={job},{INDEX}={rank}").items
        return next((p.metadata.name for p in pods if p.status.phase == "Running"), None)

    return wait_for(found, 60, f"rank {rank} of {job} running")


def test_a_new_try_takes_over_the_job_an_earlier_try_left_running(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """A worker crash: try 1 submitted and died; try 2 follows its Job, with its spot run, and leaves another
    run's Job alone."""
    store = Store()
    first = runner(training(), context(1, store))
    first._submit(context(1, store))  # type: ignore[arg-type]
    other = runner(training(), context(1, run_id="someone_else"))
    other._submit(context(1, run_id="someone_else"))  # type: ignore[arg-type]
    assert first.job != other.job

    second_try = context(2, store)
    run = runner(training(), second_try)
    assert take_over(run.op, run.jobs, second_try, LOG) == first.job  # type: ignore[arg-type]
    assert run.op.spot_run.workload == first.job and store[STATE_STORE_KEY]["open"] is True
    assert jobs(kubernetes_default_connection) == sorted([first.job, other.job])  # nothing deleted, nothing new


@pytest.mark.parametrize("why", ["judged", "reattach_off", "failed"])
def test_a_job_that_is_not_to_be_taken_over_is_deleted_before_the_next_try_starts(
    kubernetes_default_connection: KubernetesEmulator, why: str
) -> None:
    emulator, store = kubernetes_default_connection, Store()
    first = runner(training(), context(1, store))
    first._submit(context(1, store))  # type: ignore[arg-type]
    if why == "judged":  # the earlier try decided its end (it failed, or was killed) and closed its run
        save_run(context(1, store), STATE_STORE_KEY, first.op.spot_run, open_=False)  # type: ignore[arg-type]
    if why == "failed":  # a rank was reclaimed while nobody watched: the Job failed
        emulator.preempt(running_rank(emulator, str(first.job), 1), "default", 0)
        batch = apis(emulator)[0]
        wait_for(lambda: batch.read_namespaced_job(str(first.job), "default").status.failed, 30, "the Job to fail")
    op = training(durable=False) if why == "reattach_off" else training()
    second_try = context(2, store)
    run = runner(op, second_try)
    assert take_over(run.op, run.jobs, second_try, LOG) is None  # type: ignore[arg-type]
    assert jobs(emulator) == []  # gone before the next try creates its own
    assert not apis(emulator)[1].list_namespaced_service("default", label_selector=JOB_LABEL).items


def test_a_deferred_training_is_replaced_by_its_trigger_and_resumes_once(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The worker creates the Job and defers; the trigger sees rank 1 reclaimed and creates the next Job;
    the worker resumes once, for the result, the spot record and the cleanup."""
    from airflow.sdk.exceptions import TaskDeferred

    emulator, ctx = kubernetes_default_connection, context()
    op = training(seconds=8, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)  # type: ignore[arg-type]
    trigger, method = deferred.value.trigger, deferred.value.method_name
    assert method == RESUME_METHOD and type(trigger).__name__ == "GPUTrainingJobTrigger"
    [first] = jobs(emulator)
    assert len(json.dumps(trigger.serialize()[1])) < 60_000  # one Job and Service, and a delta per placement

    async def until_the_end() -> dict[str, Any]:
        async def event() -> dict[str, Any]:
            async for fired in trigger.run():
                return dict(fired.payload)
            raise AssertionError("no event")

        waiting = asyncio.create_task(event())
        victim = await asyncio.to_thread(running_rank, emulator, first, 1)
        held.extend(apis(emulator)[1].read_namespaced_pod(victim, "default").metadata.finalizers or [])
        await asyncio.to_thread(emulator.preempt, victim, "default", 0)
        return await asyncio.wait_for(waiting, 90)

    held: list[str] = []

    payload = asyncio.run(until_the_end())
    assert payload["job"] == f"{first}-r1"
    resumed = training(seconds=8, deferrable=True)  # a new worker process
    assert resumed.resume_execution(method, {"event": payload}, ctx) == {"loss": 0.25}  # type: ignore[arg-type]
    [interruption] = ctx["ti"].xcom["gpu_interruptions"]
    assert (interruption["workload"], interruption["outcome"]) == (first, "preempted")
    assert ctx["task_state_store"][STATE_STORE_KEY]["open"] is False  # judged: a later try takes nothing over
    assert jobs(emulator) == []  # the last Job deleted by the worker, the first by the trigger
    assert END_HOLD in held  # each machine is kept until its end is read (``utils.end_hold``), then let go:
    core = apis(emulator)[1]
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector=JOB_LABEL).items, 60, "no machine left")


def test_a_deferred_training_whose_main_log_went_before_the_resume_returns_the_line_its_trigger_read(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The fourth soak: a deferred training's trigger fired on the Job's success; by the resume, 35 s later, the
    main machine's node was gone and its log with it (404), and, unprofiled, its status held no result: the
    task succeeded without one. The trigger now reads the main machine's result line at the Job's end and
    carries it in the event; the resume falls back to it. The node is removed between the two."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_gpu.triggers.result_tail import RESULT_LINE_KEY

    emulator, ctx = kubernetes_default_connection, context()
    op = training(seconds=2, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)  # type: ignore[arg-type]
    trigger, method = deferred.value.trigger, deferred.value.method_name

    async def the_event() -> dict[str, Any]:
        async for fired in trigger.run():
            return dict(fired.payload)
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(the_event(), 90))
    assert payload["status"] == "success" and payload[RESULT_LINE_KEY] == RESULT
    core = apis(emulator)[1]
    main = core.read_namespaced_pod(payload["main_pod"], "default")
    emulator.remove_node(main.spec.node_name)  # the spot node reclaimed: the log goes with it
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod_log(payload["main_pod"], "default")
    resumed = training(seconds=2, deferrable=True)  # a new worker process
    assert resumed.resume_execution(method, {"event": payload}, ctx) == {"loss": 0.25}  # type: ignore[arg-type]


def test_the_same_try_creating_its_job_again_waits_out_the_one_being_deleted_and_makes_it_anew(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """A Job deleted in the foreground keeps its name while a pod of it is still there (one on a node that has
    not confirmed its end: here a finalizer stands for that node), and creating the name answers 409. The same
    try creating it again does not follow that Job to its end: it waits for it to go and creates it anew, and
    the Service, gone with the old Job, anew too, owned by the new Job."""
    emulator, store, hold = kubernetes_default_connection, Store(), "example.com/node-unreachable"
    batch, core = apis(emulator)
    first = runner(training(), context(1, store))
    first._submit(context(1, store))  # type: ignore[arg-type]
    name = str(first.job)
    held = running_rank(emulator, name, 1)
    core.patch_namespaced_pod(held, "default", [{"op": "add", "path": "/metadata/finalizers/-", "value": hold}])
    old = batch.read_namespaced_job(name, "default").metadata.uid
    batch.delete_namespaced_job(name, "default", propagation_policy="Foreground")

    def node_confirms() -> None:
        wait_for(lambda: core.read_namespaced_pod(held, "default").metadata.finalizers == [hold], 30, "the pod")
        core.patch_namespaced_pod(held, "default", {"metadata": {"finalizers": None}})

    release = threading.Timer(2.0, node_confirms)
    with JobHistory(emulator) as history:
        release.start()
        again = runner(training(), context(1, store))
        again._submit(context(1, store))  # type: ignore[arg-type]
    release.join()
    assert again.job == name
    job = batch.read_namespaced_job(name, "default")
    assert job.metadata.uid != old and job.metadata.deletion_timestamp is None
    assert history.created() == [name]  # once the old one was gone: never two at once
    history.assert_one_at_a_time()
    owners = core.read_namespaced_service(name, "default").metadata.owner_references or []
    assert [(o.kind, o.name, o.uid) for o in owners] == [("Job", name, job.metadata.uid)]


@pytest.mark.parametrize("nodes_readable", [True, False])
def test_a_bug_in_one_rank_fails_the_training_once_though_its_peer_sat_on_a_cordoned_node(
    kubernetes_default_connection: KubernetesEmulator, nodes_readable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Behaviour 2 of the real-cluster issue. Rank 1 exits 1 (a bug); rank 0 runs on a node that was
    cordoned meanwhile, and the Job controller (``backoffLimit: 0``) deletes it once the Job is judged.
    The bug is what the task reports: one Job, no resubmission, Airflow's retries skipped as
    ``retry_on_app_failure=False`` asks, no interruption recorded. Without ``get`` on ``nodes`` (every
    node read answered 403, as RBAC does) the same, and the task log says once, at ERROR, what is lost:
    there the machines carry no end hold (``keep_until_read=False``), so the deleted rank is gone and only
    its node could tell why; a held rank stays in the API with its end, and no node is asked."""
    from airflow_gpu.spot import node_access

    node_access._said.clear()
    emulator, core = kubernetes_default_connection, apis(kubernetes_default_connection)[1]
    if not nodes_readable:
        emulator.inject_api_fault(verb="get", resource="nodes", status=403, times=None)
    op = training(spot={"retry_on_app_failure": False}, **({} if nodes_readable else {"keep_until_read": False}))
    ti, failure = Ti(1, dag_id="training_dag", run_id="manual__1"), []
    ctx = {**context(1), "ti": ti}

    def run() -> None:
        try:
            op.execute(ctx)  # type: ignore[arg-type]
        except BaseException as error:  # handed to the test's thread
            failure.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    job = wait_for(lambda: next(iter(jobs(emulator)), None), 60, "the training Job")
    rank0, rank1 = running_rank(emulator, job, 0), running_rank(emulator, job, 1)
    emulator.cordon(core.read_namespaced_pod(rank0, "default").spec.node_name)
    emulator.finish(rank1, exit_code=1)
    worker.join(120)
    assert not worker.is_alive() and failure, "the training did not fail"
    assert type(failure[0]).__name__ == "AirflowFailException", failure[0]
    assert "the application failed" in str(failure[0]) and "exit code 1" in str(failure[0])
    assert jobs(emulator) == [] or jobs(emulator) == [job]  # never a second Job
    assert ti.xcom.get("gpu_interruptions", []) == []
    said = [r for r in caplog.records if "cannot read node" in r.getMessage()]
    if nodes_readable:
        assert said == []
    else:
        assert [r.levelname for r in said if r.levelname == "ERROR"] == ["ERROR"]
        assert "`get` on `nodes`" in said[0].getMessage()


@pytest.mark.parametrize("retries", [1, 0])
def test_a_crashed_trigger_leaves_the_running_job_to_the_retry_that_takes_it_over_or_deletes_it(
    kubernetes_default_connection: KubernetesEmulator, retries: int
) -> None:
    """The trigger crashed while the training ran: the task resumes in ``__fail__``. With a retry to come, the
    Job trains on and the retry takes it over (its run left open), creating nothing; on the task's last try
    the Job and its Service go, the run closed. Before, the Job was deleted whatever came next."""
    from airflow.sdk.exceptions import TaskDeferralError, TaskDeferred

    emulator, store = kubernetes_default_connection, Store()
    first_try = context(1, store, max_tries=retries)
    with pytest.raises(TaskDeferred):
        training(deferrable=True).execute(first_try)  # type: ignore[arg-type]
    [first] = jobs(emulator)
    with pytest.raises(TaskDeferralError):
        training(deferrable=True).resume_execution("__fail__", {"error": "Trigger failure"}, first_try)  # type: ignore[arg-type]
    if not retries:
        assert jobs(emulator) == [] and store[STATE_STORE_KEY]["open"] is False
        assert not apis(emulator)[1].list_namespaced_service("default", label_selector=JOB_LABEL).items
        return
    assert jobs(emulator) == [first] and store[STATE_STORE_KEY]["open"] is True
    second_try = context(2, store, max_tries=retries)
    with pytest.raises(TaskDeferred) as deferred:
        training(deferrable=True).execute(second_try)  # type: ignore[arg-type]
    assert deferred.value.trigger.job_name == first and jobs(emulator) == [first]  # followed, nothing new


@pytest.mark.parametrize("then", ["a retry takes it over", "no retry comes", "a rank is reclaimed"])
def test_an_orphaned_training_try_makes_no_job_and_leaves_its_job_to_a_retry_or_deletes_it(
    kubernetes_default_connection: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """The fourth soak: a Celery worker was SIGKILLed while a sync training waited on its Job. The task process
    lives on (Airflow's task runner has a process group of its own) and can tell Airflow nothing; before, it
    went on waiting, replaced a reclaimed Job (two Jobs made after the task was marked success), and left the
    last one Pending for nobody. Now it stops (``orphaned_try``): the Job is left to the retry, watched until
    the retry takes it over, and, no machine of it started, deleted once no retry came within the patience; a
    reclaim makes nothing new.
    The supervisor's death is played by the recorded parent pid changing (``_supervisor``)."""
    from airflow_gpu.operators.orphaned_try import TAKEN_ANNOTATION, OrphanedTry

    monkeypatch.setenv("AIRFLOW__GPU__ORPHANED_TRY_PATIENCE_SECONDS", "1" if then == "no retry comes" else "600")
    emulator, store = kubernetes_default_connection, Store()
    if then == "no retry comes":  # its machines still pulling: nothing started, nothing lost by the delete
        emulator.slow_pulls(120, times=2)
    first_try = context(1, store, max_tries=2)
    run = runner(training(), first_try)
    raised: list[BaseException] = []

    def orphan() -> None:
        try:
            run.run(first_try)  # type: ignore[arg-type]
        except BaseException as error:
            raised.append(error)

    with JobHistory(emulator) as history:
        thread = threading.Thread(target=orphan)
        thread.start()
        wait_for(lambda: run.job, 60, "the Job")
        first = str(run.job)
        if then != "no retry comes":
            running_rank(emulator, first, 1)
        run.op._supervisor = -1  # type: ignore[attr-defined]  # another parent: the supervisor is gone
        if then == "a rank is reclaimed":
            emulator.preempt(running_rank(emulator, first, 1), "default", 0)
        if then == "a retry takes it over":
            second_try = context(2, store, max_tries=2)
            retry = runner(training(), second_try)
            assert take_over(retry.op, retry.jobs, second_try, LOG) == first  # type: ignore[arg-type]
            job = apis(emulator)[0].read_namespaced_job(first, "default")
            assert job.metadata.annotations[TAKEN_ANNOTATION] == retry.op._taker  # type: ignore[attr-defined]
        thread.join(120)
        assert not thread.is_alive() and isinstance(raised[0], OrphanedTry)
        if then == "no retry comes":
            wait_for(lambda: jobs(emulator) == [], 60, "the Job deleted")
        if then == "a retry takes it over":
            assert jobs(emulator) == [first]  # the orphan left it to the retry
    assert history.created() == [first]  # the orphan made no Job more


class LostNodeClient:
    """KPO's client where the main machine's node is gone: every log read answers 404, or, with ``status``,
    what an API server answers that is down (a fake at the boundary ``MachineLogs`` calls through, the
    official client's exception); ``reads`` counts the calls."""

    def __init__(self, status: int = 404) -> None:
        self.status, self.reads = status, 0

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.reads += 1
        raise client.ApiException(status=self.status, reason="Not Found" if self.status == 404 else "Unavailable")


def machine_logs(run: IndexedJobTraining, api: Any) -> MachineLogs:
    return MachineLogs(api, "default", run.op.base_container_name, LOG)


def test_a_main_machine_whose_log_went_with_its_node_gives_its_result_from_its_termination_message() -> None:
    """The soak (seed 463621002: 6 Kubernetes trainings ended without a result): PodGC deleted the main pod with
    its node right after the success. The main pod as the Job's tracking last saw it holds the profiler's
    termination message (``profiling.termination``); without one the log's loss is the reason given."""
    op = training()
    run = op._make_runner(op.launch)
    assert isinstance(run, IndexedJobTraining)
    logs = machine_logs(run, LostNodeClient())
    end = f'{RESULT}\n::airflow-gpu-end::{{"exit_code": 0, "signals": [], "spot_notice": null, "result": "kept"}}'
    main = {"metadata": {"name": "train-0"}, "status": {"containerStatuses": [
        {"name": run.op.base_container_name, "state": {"terminated": {"exitCode": 0, "message": end}}}]}}  # fmt: skip
    output, unread = logs.main_output(main)
    assert unread is None and output is not None and output.result == {"loss": 0.25}
    del main["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    output, unread = logs.main_output(main)
    assert output is None and unread is not None and "404" in unread


def test_a_main_log_read_rides_out_a_down_api_and_falls_back_to_the_line_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fifth soak: two sync trainings succeeded without their result, the one read of the main machine's
    log answered 503. The read is asked again as every call is (``api_retry``); when the API stays down past the
    budget, the result line the main machine's follower read as it ran is the result."""
    from airflow_gpu.operators import training_job_logs

    # the read's own budget (30 s), not api_retry's default, bounds it: with the module's fast backoff, several asks
    monkeypatch.setattr(training_job_logs, "READ_BUDGET_SECONDS", 1.0)
    op = training()
    run = op._make_runner(op.launch)
    assert isinstance(run, IndexedJobTraining)
    down = LostNodeClient(503)
    logs = machine_logs(run, down)
    main = {"metadata": {"name": "train-0"}, "status": {}}
    output, unread = logs.main_output(main)
    assert output is None and unread is not None and "503" in unread and down.reads > 1  # asked again
    logs._results["train-0"] = RESULT  # what its follower read as the machine ran
    output, unread = logs.main_output(main)
    assert unread is None and output is not None and output.result == {"loss": 0.25}


def test_a_deferred_training_whose_main_pod_went_with_its_node_reads_the_pod_its_trigger_saw() -> None:
    """The soak (seed 463621002: 4 deferred trainings without a result): the main machine's pod succeeded and
    was deleted with its node before the task resumed, so the worker's listing no longer had it ("the main
    machine's pod was never seen"). The trigger's event carries it as the watch saw it last, with the
    termination message that holds the result. ``jobs`` is a fake at the boundary: the listing, empty."""
    from airflow_gpu.operators.training_job_deferral import ended_job
    from airflow_gpu.spot.classifier import Classification, Outcome
    from airflow_gpu.spot.training_job import to_json
    from airflow_gpu.triggers.training_job import MAIN_SEEN_KEY

    class Gone:
        def pods(self, name: str) -> dict[str, Any]:
            return {}

    op = training()
    run = op._make_runner(op.launch)
    assert isinstance(run, IndexedJobTraining)
    end = f'{RESULT}\n::airflow-gpu-end::{{"exit_code": 0, "signals": [], "spot_notice": null, "result": "kept"}}'
    main = {"metadata": {"name": "train-x-0-abcde", "labels": {INDEX: "0"}}, "status": {"containerStatuses": [
        {"name": run.op.base_container_name, "state": {"terminated": {"exitCode": 0, "message": end}}}]}}  # fmt: skip
    event = {"status": "success", "job": "train-x", "result": to_json(Classification(Outcome.SUCCEEDED, "Succeeded")),
             MAIN_SEEN_KEY: main}  # fmt: skip
    _, ended = ended_job(run.op, Gone(), event, LOG)  # type: ignore[arg-type]
    assert ended is not None and ended.pods.main() == main
    output, unread = machine_logs(run, LostNodeClient()).main_output(ended.pods.main())
    assert unread is None and output is not None and output.result == {"loss": 0.25}


def test_a_machine_reclaimed_once_the_main_machine_finished_with_its_result_leaves_the_training_a_success(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The eighth soak: the main machine (rank 0) printed its result and exited 0; rank 1, still at torch's exit
    barrier, was then reclaimed, the Job failed (``backoffLimit: 0``), and the operator ran the finished training
    again (a Job made after a success). The training finished: the task returns the main machine's result, with
    one Job and no interruption recorded. The machines' termination message holds what the profiler writes at a
    finish (its result and end lines: ``SIMULATED_MESSAGE``)."""
    emulator = kubernetes_default_connection
    end = {"v": 1, "exit_code": 0, "signals": [], "spot_notice": None, "result": "kept"}
    op = AccelerateTrainOperator(
        task_id="train", training_script=SCRIPT, target="kubernetes", accelerator="L4", num_machines=2,
        image="simulated.local/train:1", gpu_profile=False, namespace="default", poll_interval=0.2,
        env={"SIMULATED_SECONDS": "600", "SIMULATED_OUTPUT": f"training\n{RESULT}",
             "SIMULATED_MESSAGE": f"{RESULT}\n::airflow-gpu-end::{json.dumps(end)}"},
    )  # fmt: skip
    ctx, result, failure = context(1), [], []

    def run() -> None:
        try:
            result.append(op.execute(ctx))  # type: ignore[arg-type]
        except BaseException as error:  # handed to the test's thread
            failure.append(error)

    with JobHistory(emulator) as history:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        job = wait_for(lambda: next(iter(jobs(emulator)), None), 60, "the training Job")
        main, other = running_rank(emulator, job, 0), running_rank(emulator, job, 1)
        emulator.finish(main)  # the training's end, on the main machine
        core = apis(emulator)[1]
        wait_for(lambda: core.read_namespaced_pod(main, "default").status.phase == "Succeeded", 30, "rank 0 done")
        emulator.preempt(other, "default", 0)  # rank 1 lost at the exit barrier
        worker.join(120)
    assert not worker.is_alive() and not failure, failure
    assert result == [{"loss": 0.25}]
    assert history.created() == [job]  # never run again
    assert ctx["ti"].xcom.get("gpu_interruptions", []) == []

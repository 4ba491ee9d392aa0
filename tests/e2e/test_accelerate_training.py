"""``AccelerateTrainOperator`` end to end: real ``accelerate launch`` runs of a tiny PyTorch model.

* The shipped ``accelerate_training`` example DAG on the shared stack: two CPU processes on the
  worker, two machines as an Indexed Job on the stack's Kubernetes emulator, two nodes as a
  multi-node parallel job on its AWS Batch emulator. Each training's return value (XCom) must show
  both ranks, the machines they ran on, and a falling loss.
* A two-machine Job on spot nodes whose rank-1 machine is reclaimed mid-run: the whole Job is
  created again (one interruption, counted once for the Job), and the training resumes from its
  checkpoint and finishes with a falling loss. Watched over the whole run: no two Jobs' pods alive
  at once, and nothing left behind. The same deferred: the triggerer creates the next Job itself,
  the task defers once and resumes once, and never are two Jobs there at once.
* A worker killed mid-training: the next try takes the running Job over (no second Job) and the
  training finishes in the Job the first try created.

The emulated machines have no CUDA: the processes rendezvous over gloo on CPU, through the same
flags a GPU run gets (``--multi_gpu``, ``--machine_rank``, ``--main_process_ip``).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, scenarios
from tests.e2e.test_gpu_lifecycle import task_log
from tests.kubernetes_history import JobHistory

pytestmark = pytest.mark.slow

JOB_LABEL = "airflow-gpu/training-job"
INDEX = "batch.kubernetes.io/job-completion-index"


def api(emulator: KubernetesEmulator) -> client.ApiClient:
    return config.new_client_from_config(str(emulator.kubeconfig_path))


def assert_trained(result: dict[str, Any], machines: list[int]) -> None:
    """Both ranks ran, on the machines expected, and the loss went down."""
    assert result["ranks"] == [0, 1] and result["world_size"] == 2, result
    assert result["machines"] == machines, result
    losses = result["losses"]
    assert len(losses) >= 2 and losses[-1] < losses[0] / 2, losses


class RankOneReclaimer(Injector):
    """Reclaims the rank-1 machine of the first training Job once it has trained an epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.reclaimed: list[str] = []

    def inject(self) -> None:
        core = client.CoreV1Api(api(self.emulator))
        while not self.reclaimed and not self.stop.is_set():
            for pod in core.list_namespaced_pod("default", label_selector=f"{INDEX}=1").items:
                if pod.status.phase != "Running":
                    continue
                log = core.read_namespaced_pod_log(pod.metadata.name, "default", _preload_content=False).data
                if b"rank 1 epoch 0" in log:
                    self.emulator.preempt(pod.metadata.name)
                    self.reclaimed.append(pod.metadata.name)
                    break
            self.stop.wait(0.2)


class DeferredRankOneReclaimer(RankOneReclaimer):
    """``RankOneReclaimer``, with every Job of the run recorded from before the task starts."""

    def inject(self) -> None:
        self.jobs = JobHistory(self.emulator)
        self.jobs.start()
        try:
            super().inject()
            self.stop.wait()
        finally:
            self.jobs.stop.set()
            self.jobs.join(timeout=10)


def assert_one_job_at_a_time(run: ScenarioRun, jobs: int) -> dict[str, set[str]]:
    """Over the whole run: ``jobs`` training Jobs of two pods each, never two Jobs' pods alive at once."""
    assert run.pods is not None
    found: dict[str, set[str]] = {}
    alive: dict[str, str] = {}
    for kind, pod in run.pods.events:
        labels = pod["metadata"].get("labels") or {}
        job, name = labels.get(JOB_LABEL), pod["metadata"]["name"]
        if job is None:
            continue
        found.setdefault(job, set()).add(name)
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            alive.pop(name, None)
            continue
        alive[name] = job
        assert set(alive.values()) == {job}, f"pods of two training Jobs alive at once: {alive}"
    assert [len(pods) for pods in found.values()] == [2] * jobs, found
    return found


def assert_nothing_left(emulator: KubernetesEmulator) -> None:
    assert client.BatchV1Api(api(emulator)).list_namespaced_job("default").items == []
    core = client.CoreV1Api(api(emulator))
    assert core.list_namespaced_pod("default", label_selector=JOB_LABEL).items == []
    assert core.list_namespaced_service("default", label_selector=JOB_LABEL).items == []


@scenarios(Scenario("accelerate_training", "shared", conf={"emulated": True, "epochs": 3}))
def test_the_example_trains_on_the_worker_on_kubernetes_and_on_batch(
    scenario_run: ScenarioRun,
    airflow_stack: tuple[Any, KubernetesEmulator],
    stack_batch_emulator: BatchEmulator,
) -> None:
    run = scenario_run
    states = {t["task_id"]: t["state"] for t in run.task_instances()}
    assert states == dict.fromkeys(("train_on_worker", "train_on_kubernetes", "train_on_batch", "report"), "success")
    worker = run.xcom(task_id="train_on_worker")
    assert_trained(worker, machines=[0])
    assert worker["device"] == "cpu"  # no GPU on the worker: the same launch on CPU
    assert_trained(run.xcom(task_id="train_on_kubernetes"), machines=[0, 1])
    assert_trained(run.xcom(task_id="train_on_batch"), machines=[0, 1])

    # Kubernetes: an Indexed Job of two pods, each the rank its completion index says; all gone now.
    log = run.log(task_id="train_on_kubernetes")
    assert "Created Indexed Job" in log and "[machine 1] rank 1 epoch 0" in log
    emulator = airflow_stack[1]
    jobs = client.BatchV1Api(api(emulator)).list_namespaced_job("default", label_selector="task_id=train_on_kubernetes")
    assert jobs.items == []
    core = client.CoreV1Api(api(emulator))
    assert core.list_namespaced_pod("default", label_selector=JOB_LABEL).items == []
    assert core.list_namespaced_service("default", label_selector=JOB_LABEL).items == []

    # Batch: one multi-node parallel job of two nodes on the on-demand queue, from nodeProperties.
    batch = stack_batch_emulator.client("batch")
    job_id = run.xcom("batch_job_id", task_id="train_on_batch")
    job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
    assert job["status"] == "SUCCEEDED" and job["jobQueue"].endswith("/gpu-on-demand")
    definition = batch.describe_job_definitions(jobDefinitions=[job["jobDefinition"]])["jobDefinitions"][0]
    assert definition["type"] == "multinode" and definition["nodeProperties"]["numNodes"] == 2
    assert definition["nodeProperties"]["mainNode"] == 0
    nodes = batch.describe_jobs(jobs=[f"{job_id}#0", f"{job_id}#1"])["jobs"]
    assert sorted((n["nodeDetails"]["nodeIndex"], n["nodeDetails"]["isMainNode"]) for n in nodes) == [
        (0, True),
        (1, False),
    ]


@scenarios(Scenario("accelerate_kubernetes_preempt", "kubernetes", injector=RankOneReclaimer))
def test_a_reclaimed_machine_restarts_the_whole_job_which_resumes(scenario_run: ScenarioRun) -> None:
    run = scenario_run
    assert [(t["try_number"], t["state"]) for t in run.tries()] == [(1, "success")]
    assert isinstance(run.injector, RankOneReclaimer) and len(run.injector.reclaimed) == 1
    result = run.xcom()
    assert_trained(result, machines=[0, 1])
    assert result["attempt"] == 2 and result["start_epoch"] >= 1  # the second Job resumed from the checkpoint
    interruptions = run.xcom("gpu_interruptions")
    assert [(i["outcome"], i["capacity"]) for i in interruptions] == [("preempted", "spot")]

    # Over the whole run: two Jobs of two pods each, never alive at the same time.
    jobs = assert_one_job_at_a_time(run, 2)
    assert run.injector.reclaimed[0] in next(iter(jobs.values()))

    log = run.log()
    assert "GPU interruption 1: preempted" in log and "Creating the training Job again" in log
    assert_nothing_left(run.emulator)


@scenarios(Scenario("accelerate_kubernetes_deferrable_preempt", "kubernetes", injector=DeferredRankOneReclaimer))
def test_a_deferred_training_is_carried_through_a_reclaim_by_the_triggerer(scenario_run: ScenarioRun) -> None:
    """The task defers once: the triggerer sees the reclaim, deletes the Job, creates the next one and
    hands the task back for the end only; the interruption is counted once, and never are two Jobs there."""
    run = scenario_run
    assert [(t["try_number"], t["state"]) for t in run.tries()] == [(1, "success")]
    assert isinstance(run.injector, DeferredRankOneReclaimer) and len(run.injector.reclaimed) == 1
    result = run.xcom()
    assert_trained(result, machines=[0, 1])
    assert result["attempt"] == 2 and result["start_epoch"] >= 1  # the trigger's Job resumed from the checkpoint
    interruptions = run.xcom("gpu_interruptions")
    assert [(i["outcome"], i["capacity"]) for i in interruptions] == [("preempted", "spot")]

    history = run.injector.jobs
    first, second = history.created()  # the worker's, then the trigger's: no duplicate, ever
    assert second == f"{first}-r1" and interruptions[0]["workload"] == first
    history.assert_one_at_a_time()
    assert_one_job_at_a_time(run, 2)

    worker_log = task_log(run.stack, run.dag_id, run.run_id, 1)
    assert worker_log.count("Deferring: the triggerer watches training Job") == 1  # no worker round trip
    trigger_log = run.trigger_log()
    assert "GPU interruption 1: preempted" in trigger_log and f"in place of {first}" in trigger_log
    assert "[machine 1] rank 1 epoch 0" in trigger_log  # the interrupted Job's output, kept
    assert_nothing_left(run.emulator)


@scenarios(Scenario("accelerate_kubernetes_deferrable", "kubernetes"))
def test_one_machine_defers_to_the_triggerer_and_resumes_through_the_training_operator(
    scenario_run: ScenarioRun,
) -> None:
    """The pod is GPUKubernetesOperator's, deferred: the task comes back through
    AccelerateTrainOperator.resume_execution, which hands the event to that operator."""
    run = scenario_run
    assert [(t["try_number"], t["state"]) for t in run.tries()] == [(1, "success")]
    assert run.trigger_log(), "the task never deferred"
    result = run.xcom()
    assert result["ranks"] == [0] and result["losses"][-1] < result["losses"][0]
    assert run.xcom("gpu_accelerator")["accelerator"] == "L4"
    assert run.xcom("gpu_profile")["backend"] == "kubernetes"


def one_gpu_quota(emulator: KubernetesEmulator) -> None:
    """A ResourceQuota with room for one of the training's two L4 machines."""
    core = client.CoreV1Api(api(emulator))
    quota = {"metadata": {"name": "gpu-quota"}, "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}
    core.create_namespaced_resource_quota("default", quota)


@scenarios(Scenario("accelerate_kubernetes_quota", "kubernetes", prepare=one_gpu_quota))
def test_a_training_partly_refused_at_admission_fails_with_the_quota_and_leaves_nothing(
    scenario_run: ScenarioRun,
) -> None:
    """Issue 25, behaviour 1, through a real worker: the quota admits rank 0 and refuses rank 1 (the Job
    controller's ``FailedCreate``). Past ``startup_timeout_seconds`` the Job and Service are deleted and the
    task fails once, naming the quota, neither as an application error nor resubmitted; nothing is left."""
    run = scenario_run
    assert [(t["try_number"], t["state"]) for t in run.tries()] == [(1, "failed")]
    log = run.log()
    assert "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1" in log
    assert "1 of 2 machines of Job" in log and "the application failed" not in log
    assert run.xcom("gpu_interruptions") in (None, [])
    assert run.pods is not None
    created = {p["metadata"]["name"] for _, p in run.pods.events if JOB_LABEL in (p["metadata"].get("labels") or {})}
    assert len(created) == 1, created  # rank 0 only: one Job, never resubmitted
    assert_nothing_left(run.emulator)

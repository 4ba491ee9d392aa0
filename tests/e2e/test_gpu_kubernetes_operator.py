"""``GPUKubernetesOperator`` end to end: each scenario of tests/e2e/stack_dags/gpu_kubernetes_scenarios.py
runs on the shared Airflow stack (a real worker per try, the real triggerer for deferrable tasks)
against a Kubernetes emulator of its own, with spot preemptions injected while the task runs; one
of them also through ``airflow dags test`` (``dag.test()``), the way users test their DAGs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_gpu.links.profile import GPUProfileLink
from airflow_gpu.plugins.urls import absolute_task_url
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.e2e.conftest import DagsTestRun
from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, scenarios


def without_location(summary: dict[str, object]) -> dict[str, object]:
    """XCom ``gpu_accelerator`` minus ``location`` (the node the last pod ran on), which must be a node name."""
    assert isinstance(summary.pop("location"), str)
    return summary


pytestmark = pytest.mark.slow

SPOT_NODES = ("gpu-spot-1", "gpu-spot-2")


def core_api(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))


def train_pods(api: client.CoreV1Api) -> list[client.V1Pod]:
    """The task's pods. An injector polls this ten times a second: it keeps one client (a client
    per call parsed the kubeconfig and opened a connection each time, most of the suite's own CPU)."""
    return list(api.list_namespaced_pod("default", label_selector="task_id=train").items)


def steps(api: client.CoreV1Api, pod: str) -> int:
    """How many training steps the pod has printed (its log, raw: the client's decoding mangles it)."""
    log = api.read_namespaced_pod_log(pod, "default", _preload_content=False).data.decode()
    return sum(line.startswith("step ") for line in log.splitlines())


class Disrupter(Injector):
    """Does ``fault`` (an emulator method taking a pod name) to the first ``times`` pods of the task,
    each once it has made progress (printed 3 steps); ``disrupted`` names them in order. Its
    scenario holds the workload (``hold=True``): each pod waits after 3 steps until this has done
    all its faults and releases it."""

    def __init__(self, fault: str, times: int = 1) -> None:
        super().__init__()
        self.fault, self.times, self.disrupted = fault, times, []
        self.workdir: Path | None = None  # the run's ``dag_run.conf["workdir"]`` where no scenario run is bound

    def inject(self) -> None:
        api = core_api(self.emulator)
        try:
            while len(self.disrupted) < self.times and not self.stop.is_set():
                for pod in train_pods(api):
                    name = pod.metadata.name
                    if pod.status.phase == "Running" and name not in self.disrupted and steps(api, name) >= 3:
                        getattr(self.emulator, self.fault)(name)
                        self.disrupted.append(name)
                        if len(self.disrupted) == self.times:
                            break
                self.stop.wait(0.1)
        finally:  # the next pod runs to its end (or, stopped early, none waits forever)
            ((self.workdir or self.scenario_run.workdir) / "release").touch()


class Preempter(Disrupter):
    """Spot reclaims of the first ``times`` pods."""

    def __init__(self, times: int) -> None:
        super().__init__("preempt", times)

    @property
    def preempted(self) -> list[str]:
        return self.disrupted


class PendingPodDeleter(Injector):
    """Deletes the task's first pod while it is Pending (the spot nodes are cordoned until then)."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    def inject(self) -> None:
        api = core_api(self.emulator)
        try:
            while not self.stop.is_set():
                pending = [p.metadata.name for p in train_pods(api) if p.status.phase == "Pending"]
                if pending:
                    api.delete_namespaced_pod(pending[0], "default", grace_period_seconds=0)  # ...and is gone
                    self.deleted.append(pending[0])
                    return
                self.stop.wait(0.1)
        finally:
            for node in SPOT_NODES:
                self.emulator.cordon(node, unschedulable=False)


def cordon_spot_nodes(emulator: KubernetesEmulator) -> None:
    for node in SPOT_NODES:  # the first pod stays Pending
        emulator.cordon(node)


def kube(
    dag_id: str,
    prepare: Callable[[KubernetesEmulator], None] | None = None,
    injector: Callable[[], Injector] | None = None,
    hold: bool = False,
) -> Scenario:
    """``hold``: the workload waits after 3 steps for the injector's release (a ``Disrupter``)."""
    return Scenario(dag_id, "kubernetes", prepare=prepare, injector=injector, conf={"hold": True} if hold else {})


def both_modes(
    dag_id: str,
    prepare: Callable[[KubernetesEmulator], None] | None = None,
    injector: Callable[[], Injector] | None = None,
    hold: bool = False,
) -> pytest.MarkDecorator:
    return scenarios(
        kube(dag_id, prepare, injector, hold),
        kube(f"{dag_id}_deferrable", prepare, injector, hold),
        ids=["sync", "deferrable"],
    )


def scheduled(emulator: KubernetesEmulator) -> list[str]:
    """Where the scheduler put each of the task's pods, ever (its Scheduled events outlive the pods)."""
    events = core_api(emulator).list_namespaced_event("default").items
    return [e.message for e in events if e.reason == "Scheduled" and e.involved_object.name.startswith("train-")]


def assert_one_try(run: ScenarioRun, state: str) -> None:
    """The task ended ``state`` in its first try: no retry was ever scheduled, whatever ``retries`` says;
    and, watched over the whole run, never were two of its pods alive at once."""
    assert [(t["try_number"], t["state"]) for t in run.tries()] == [(1, state)]
    assert run.pods is not None and run.pods.overlaps() == []
    assert any(kind == "ADDED" for kind, _ in run.pods.events)  # the watch saw the run


@scenarios(kube("gpu_kubernetes_single"))
def test_single_gpu_pod(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert "accelerator=L4 capacity=any" in scenario_run.log()
    assert scenario_run.xcom("gpu_interruptions") == []
    assert without_location(scenario_run.xcom("gpu_accelerator")) == {"accelerator": "L4", "capacity": "any"}
    assert train_pods(core_api(scenario_run.emulator)) == []  # deleted when done, as KPO does


def assert_resumed_after_two_preemptions(run: ScenarioRun, deferrable: bool) -> None:
    assert run.state() == "success"
    assert_one_try(run, "success")  # both preemptions were absorbed inside the try
    log = run.log()
    assert "result 465" in log  # sum(1..30): the same answer as without preemptions
    assert log.count("SIGTERM at step") == 2
    assert "notice True" in log  # the preStop hook wrote the spot notice before SIGTERM
    assert isinstance(run.injector, Preempter)
    preempted = run.injector.preempted
    interruptions = run.xcom("gpu_interruptions")
    assert [i["reason"] for i in interruptions] == ["TerminationByKubelet", "TerminationByKubelet"]
    assert [i["workload"] for i in interruptions] == preempted
    assert [f["pod"] for f in run.emulator.faults] == preempted  # injected == seen
    assert without_location(run.xcom("gpu_accelerator")) == {"accelerator": "H100:8", "capacity": "spot"}
    if deferrable:  # one deferral: the triggerer created the replacements, no worker round trip
        assert log.count("Pausing task as DEFERRED") == 1
        assert [line.split(" in place of ")[1].split()[0] for line in log.splitlines() if " in place of " in line] == (
            preempted
        )
    # The last pod's GPU profile: its 8 GPUs as the node's driver reports them, the run's history.
    profile = run.xcom("gpu_profile")
    assert profile["source"] == "nvidia-smi" and profile["driver"]
    assert [g["name"] for g in profile["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert profile["interruptions"] == 2 and profile["capacity"] == "spot" and profile["accelerator"] == "H100:8"
    assert profile["instance_type"] == "p5.48xlarge"  # the node's label
    assert profile["workload"] not in preempted and all(s["samples"] >= 1 for s in profile["summary"])
    link = run.xcom(f"_link_{GPUProfileLink.__name__}")
    assert link == absolute_task_url(run.stack.url, run.dag_id, run.run_id, "train", -1)


@both_modes("gpu_kubernetes_preempt", injector=lambda: Preempter(times=2), hold=True)
def test_preemption_resumes_from_checkpoint(scenario_run: ScenarioRun) -> None:
    assert_resumed_after_two_preemptions(scenario_run, scenario_run.dag_id.endswith("_deferrable"))


def test_dag_test_runs_a_deferrable_preemption_in_one_process(dags_test_run: DagsTestRun) -> None:
    """``airflow dags test`` (``dag.test()``), as users run their DAGs against the emulator in their
    own tests: the deferrable path with its trigger run inline, two preemptions, one answer. It ran
    in its own process beside the scenarios (``tests/e2e/conftest.py``)."""
    completed = dags_test_run.wait()
    preempter = dags_test_run.injector
    assert isinstance(preempter, Preempter) and preempter.error is None
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert "result 465" in completed.stdout
    assert completed.stdout.count("SIGTERM at step") == 2
    assert completed.stdout.count("Pausing task as DEFERRED") == 1  # the trigger made the replacements
    assert "new_state=success" in completed.stdout
    assert [f["pod"] for f in dags_test_run.emulator.faults] == preempter.preempted


@both_modes("gpu_kubernetes_vanish", prepare=cordon_spot_nodes, injector=PendingPodDeleter)
def test_pod_deleted_before_it_starts_is_resubmitted(scenario_run: ScenarioRun) -> None:
    """apache/airflow#59626: a pod preempted before it starts is a 404, not a failed task."""
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert "ran attempt 2" in scenario_run.log()
    assert isinstance(scenario_run.injector, PendingPodDeleter)
    [deleted] = scenario_run.injector.deleted
    assert [(i["workload"], i["reason"]) for i in scenario_run.xcom("gpu_interruptions")] == [(deleted, "PodDeleted")]


@both_modes("gpu_kubernetes_fallback", injector=lambda: Preempter(times=1), hold=True)
def test_fallback_to_on_demand_then_next_candidate(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    log = scenario_run.log()
    assert "result 465" in log
    assert "falling back to on-demand capacity" in log
    assert "trying the next accelerator candidate" in log
    assert len(scenario_run.xcom("gpu_interruptions")) == 1
    assert without_location(scenario_run.xcom("gpu_accelerator")) == {"accelerator": "L4:4", "capacity": "on-demand"}


@scenarios(kube("gpu_kubernetes_unschedulable"))
def test_unschedulable_moves_to_the_next_candidate(scenario_run: ScenarioRun) -> None:
    assert scenario_run.state() == "success"
    assert "ran on L4:2" in scenario_run.log()
    assert without_location(scenario_run.xcom("gpu_accelerator")) == {"accelerator": "L4:2", "capacity": "on-demand"}
    pods = core_api(scenario_run.emulator).list_namespaced_pod("default").items
    assert all(p.spec.node_name for p in pods)  # no pending pod left behind
    events = core_api(scenario_run.emulator).list_namespaced_event("default").items
    assert any(e.reason == "FailedScheduling" for e in events)  # the B200 pod found no node...
    [placed] = scheduled(scenario_run.emulator)  # ...and only the L4 pod ever ran
    assert placed.endswith(" to gpu-on-demand-1"), placed


@both_modes("gpu_kubernetes_app_failure")
def test_application_failure_fails_without_retries(scenario_run: ScenarioRun) -> None:
    # The task has retries=2, but a bug is not a preemption: failed at once, never up_for_retry.
    assert scenario_run.state() == "failed"
    assert_one_try(scenario_run, "failed")
    log = scenario_run.log()
    assert "the application failed (container base failed: exit code 7)" in log
    assert "retry_on_app_failure=False" in log
    assert len(scheduled(scenario_run.emulator)) == 1  # one pod, ever: no retry pods
    assert scenario_run.xcom("gpu_interruptions") == []


@scenarios(kube("gpu_kubernetes_bad_result"))
def test_a_result_line_that_is_not_json_fails_at_once_and_leaves_no_pod(scenario_run: ScenarioRun) -> None:
    """Behaviour 8: KPO's cleanup runs whatever the classification raised; no retry, no second pod."""
    assert scenario_run.state() == "failed"
    assert_one_try(scenario_run, "failed")
    assert "the workload printed a result that is not JSON" in scenario_run.log()
    assert len(scheduled(scenario_run.emulator)) == 1
    assert train_pods(core_api(scenario_run.emulator)) == []  # deleted by KPO's on_finish_action


@scenarios(kube("gpu_kubernetes_skip"))
def test_skip_on_exit_code_skips_as_with_kpo(scenario_run: ScenarioRun) -> None:
    """Behaviour 9: the task is skipped (the run itself succeeds, as with KPO)."""
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "skipped")
    assert "Skipping task." in scenario_run.log()
    assert scenario_run.xcom("gpu_interruptions") in (None, [])


@scenarios(kube("gpu_kubernetes_node_pressure", injector=lambda: Disrupter("evict_for_node_pressure"), hold=True))
def test_a_node_pressure_eviction_is_moved_but_is_not_a_spot_reclaim(scenario_run: ScenarioRun) -> None:
    """Behaviour 12: the kubelet's node-pressure eviction (DisruptionTarget TerminationByKubelet,
    reason Evicted) is recorded as an eviction, and the pod is replaced."""
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")
    assert isinstance(scenario_run.injector, Disrupter)
    [evicted] = scenario_run.injector.disrupted
    [interruption] = scenario_run.xcom("gpu_interruptions")
    assert interruption["workload"] == evicted and interruption["outcome"] == "evicted"
    assert interruption["backend"] == "kubernetes" and interruption["action"] == "resubmit"
    assert "result 465" in scenario_run.log()


@scenarios(kube("gpu_kubernetes_deleted", injector=lambda: Disrupter("delete_by_person"), hold=True))
def test_a_pod_deleted_by_a_person_is_not_taken_for_a_reclaim(scenario_run: ScenarioRun) -> None:
    """Behaviour 12: ``kubectl delete pod`` while the node stays: the try fails (retryable), nothing is
    resubmitted inside it; Airflow's retry then runs the task again."""
    assert scenario_run.state() == "success"
    tries = scenario_run.tries()
    assert [t["state"] for t in tries] == ["failed", "success"], tries
    assert "deleted while it ran" in scenario_run.log(try_number=1)
    assert scenario_run.xcom("gpu_interruptions") == []


#: What the API server does to the task's calls, each once or twice, before answering as usual:
#: throttling with Retry-After, a reset after the pod was written (the create's answer lost), server
#: errors and a reset on its reads of the pod, server errors on the log that holds the result. Not on
#: list or watch: the test's own PodWatch lists and watches the same namespace.
TRANSIENT_API_FAULTS = (
    {"verb": "create", "resource": "pods", "status": 429, "retry_after": 1, "times": 1},
    {"verb": "create", "resource": "pods", "status": 0, "served": True, "times": 1},
    {"verb": "get", "resource": "pods", "status": 500, "times": 2},
    {"verb": "get", "resource": "pods", "status": 0, "times": 1},
    {"verb": "get", "resource": "pods/log", "status": 503, "times": 2},
)


def transient_api_faults(emulator: KubernetesEmulator) -> None:
    for rule in TRANSIENT_API_FAULTS:
        emulator.inject_api_fault(**rule)


@both_modes("gpu_kubernetes_transient", prepare=transient_api_faults)
def test_throttling_5xx_and_resets_are_ridden_out_through_a_real_task(scenario_run: ScenarioRun) -> None:
    """Issue 25, behaviour 3 (Kubernetes), end to end: one 429, 5xx or reset on the task's calls, in the
    worker and (deferrable) around the triggerer's wait, does not fail it; the create whose answer was
    lost is followed, not made twice."""
    assert scenario_run.state() == "success"
    assert_one_try(scenario_run, "success")  # retries=2: a failed try would show as a second one
    assert scenario_run.xcom() == {"ok": True}
    assert len(scheduled(scenario_run.emulator)) == 1  # one pod, ever
    hit = [(f["verb"], f["resource"] + (f"/{f['subresource']}" if f["subresource"] else ""), f["status"])
           for f in scenario_run.emulator.api_faults_injected]  # fmt: skip
    expected = [(r["verb"], r["resource"], r["status"]) for r in TRANSIENT_API_FAULTS for _ in range(r["times"])]
    assert sorted(hit) == sorted(expected), hit

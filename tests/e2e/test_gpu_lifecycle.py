"""No orphans, no duplicates: what happens to the GPU pod when the task is killed or its worker dies.

Driven through the shared real Airflow stack (scheduler, LocalExecutor workers, triggerer, REST
API v2) against the Kubernetes emulator, because these paths run in separate processes that
``dag.test()`` does not have: "Mark Failed" reaches a running task through its supervisor's
heartbeat, a deferred task through the triggerer, and a dead worker is noticed by the scheduler.

Each is a scenario (``tests/e2e/scenarios.py``): its own emulator, its run launched with every
other scenario, and an injector that does what a person or a crash does once the pod runs. The
waiting (a heartbeat timeout, a deletion's grace period) then overlaps the other scenarios'.
"""

from __future__ import annotations

import functools
import urllib.error
from typing import Any

import psutil
import pytest
from kubernetes import client, config

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.end_hold import RELEASE_PATCH, STRATEGIC_MERGE
from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, scenarios

pytestmark = pytest.mark.slow


def core_api(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))


def pods(api: client.CoreV1Api, dag_id: str, **labels: str) -> list[Any]:
    selector = ",".join(f"{k}={v}" for k, v in {"dag_id": dag_id, **labels}.items())
    return list(api.list_namespaced_pod("default", label_selector=selector).items)


def mark_failed(stack: AirflowStack, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> None:
    """What the UI's "Mark Failed" button sends."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
    stack.request("PATCH", path + (f"/{map_index}" if map_index >= 0 else ""), {"new_state": "failed"})


def kill_worker(stack: AirflowStack, ti_id: str) -> None:
    """SIGKILL the task process and the LocalExecutor worker supervising it: a worker crash."""
    title = f"airflow worker -- {ti_id}"
    [task] = wait_for(
        lambda: [p for p in psutil.process_iter(["cmdline"]) if title in " ".join(p.info["cmdline"] or [])],
        60,
        "the task process",
    )
    supervisor = task.parent()
    for process in (task, supervisor):
        if process is not None:
            process.kill()


def safe(run_id: str) -> str:
    from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

    return str(make_safe_label_value(run_id))


def task_log(stack: AirflowStack, dag_id: str, run_id: str, try_number: int) -> str:
    try:
        answer = stack.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/logs/{try_number}")
    except urllib.error.HTTPError as error:
        return f"no log: {error}"
    content = answer.get("content", [])
    return "\n".join(str(item.get("event", item)) if isinstance(item, dict) else str(item) for item in content)


def pod_uids(run: ScenarioRun) -> set[str]:
    """Every pod the run's emulator ever had, from the watch over the whole run."""
    assert run.pods is not None
    return {pod["metadata"]["uid"] for _, pod in run.pods.events}


class PodInjector(Injector):
    """An injector with one API client and the run's running pods at hand."""

    @functools.cached_property
    def api(self) -> client.CoreV1Api:
        return core_api(self.emulator)

    def running(self, count: int) -> list[Any]:
        api, dag_id = self.api, self.scenario_run.dag_id

        def probe() -> list[Any] | None:
            found = [p for p in pods(api, dag_id) if p.status.phase == "Running"]
            return found if len(found) >= count else None

        # From the launch: on two busy cores a task may wait minutes for its worker.
        return self.until(probe, 300, f"{count} running pod(s) of {dag_id}")

    def release(self) -> None:
        (self.scenario_run.workdir / "release").touch()

    def ready(self, *shards: str) -> None:
        """Until each shard's workload has set its SIGTERM trap (it says so with a file)."""
        workdir = self.scenario_run.workdir
        self.until(lambda: all((workdir / f"release.ready.{s}").exists() for s in shards), 120, f"{shards} ready")


class MarkFailedWhenRunning(PodInjector):
    """Marks the task failed once its workload runs, then waits for the pod to go."""

    outlives_the_run = True  # the run fails at the click; the pod goes at the task's next heartbeat

    def inject(self) -> None:
        run = self.scenario_run
        [self.pod] = self.running(1)
        self.ready("solo")
        mark_failed(run.stack, run.dag_id, run.run_id, "train")
        # on_kill deletes the pod with the policy's grace period: the workload gets SIGTERM, then it is gone.
        self.until(lambda: not pods(self.api, run.dag_id), 120, "the pod to be deleted")


@scenarios(Scenario("gpu_on_kill", "kubernetes", injector=MarkFailedWhenRunning))
def test_mark_failed_deletes_the_running_pod(scenario_run: ScenarioRun) -> None:
    run = scenario_run
    assert isinstance(run.injector, MarkFailedWhenRunning)
    assert run.state() == "failed"
    assert (run.workdir / "release.sigterm.solo").exists()
    [ti] = run.task_instances()
    assert ti["state"] == "failed" and ti["try_number"] == 1
    assert run.injector.pod.spec.termination_grace_period_seconds == 5
    assert pod_uids(run) == {run.injector.pod.metadata.uid}  # never resubmitted after a person's kill
    assert pods(core_api(run.emulator), run.dag_id) == []


class MarkOneShardFailed(PodInjector):
    """Marks shard 1 of three deferred shards failed once the triggerer runs its trigger, waits for
    its pod to go, counts the others, then lets them finish."""

    def inject(self) -> None:
        run = self.scenario_run
        self.running(3)
        self.ready("0", "1", "2")

        # Mark Failed once the triggerer runs every shard's trigger (each logs to its own file, which
        # also says that its task is DEFERRED): a trigger the triggerer has not picked up yet is
        # deleted without running any code, ours or KPO's.
        def every_shard_deferred() -> bool:
            return all(run.trigger_started(task_id="train", map_index=shard) for shard in range(3))

        self.until(every_shard_deferred, 120, "three deferrals", interval=0.5)
        mark_failed(run.stack, run.dag_id, run.run_id, "train", map_index=1)
        self.until(lambda: not pods(self.api, run.dag_id, map_index="1"), 120, "shard 1's pod to be deleted")
        self.others = len(pods(self.api, run.dag_id))
        self.release()


@scenarios(Scenario("gpu_mapped_deferrable", "kubernetes", injector=MarkOneShardFailed))
def test_mark_failed_on_one_mapped_deferred_shard_deletes_only_its_pod(scenario_run: ScenarioRun) -> None:
    """apache/airflow#67296: "Mark Failed" on a mapped deferrable task left its GPU pod running."""
    run = scenario_run
    assert isinstance(run.injector, MarkOneShardFailed)
    assert run.injector.others == 2  # the other shards kept running
    assert run.state() == "failed"  # one shard failed, by hand
    assert {ti["map_index"]: ti["state"] for ti in run.task_instances()} == {0: "success", 1: "failed", 2: "success"}
    assert [run.xcom(map_index=i) for i in (0, 2)] == [{"shard": "0", "attempt": 1}, {"shard": "2", "attempt": 1}]
    assert (run.workdir / "release.sigterm.1").exists()
    assert not (run.workdir / "release.sigterm.0").exists() and not (run.workdir / "release.sigterm.2").exists()
    assert len(pod_uids(run)) == 3 and pods(core_api(run.emulator), run.dag_id) == []  # nothing left behind


class WorkerKiller(PodInjector):
    """Kills the worker once the pod runs, waits for the retry to follow its own pod, releases it.

    ``stranger``: while the worker is dead the pod is deleted and another run's pod takes its name
    (a fixed pod name, ``random_name_suffix=False``); the retry must not adopt it (apache/airflow#71743).
    """

    def __init__(self, stranger: bool = False) -> None:
        super().__init__()
        self.with_stranger = stranger
        self.stranger: Any = None

    def inject(self) -> None:
        run = self.scenario_run
        [self.first] = self.running(1)
        [ti] = run.task_instances()
        kill_worker(run.stack, ti["id"])
        if self.with_stranger:
            name = self.first.metadata.name
            self.api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            # The provider's finalizer keeps the deleted pod for a try to read (``utils.end_hold``); the person
            # who wants the name back removes it, as ``kubectl patch`` does.
            self.api.patch_namespaced_pod(name, "default", RELEASE_PATCH, _content_type=STRATEGIC_MERGE)
            self.until(lambda: not pods(self.api, run.dag_id), 60, "the pod to go")
            labels = {**self.first.metadata.labels, "run_id": "someone-elses-run"}
            container = {"name": "base", "image": "busybox", "command": ["sleep", "600"]}
            self.stranger = self.api.create_namespaced_pod(
                "default", {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [container]}}
            )

        # The second try's log file, not the task-instance list polled for minutes: the dead worker's
        # heartbeat timeout and the retry delay pass first.
        self.until(lambda: run.started(2), 600, "the second try", interval=0.5)
        if self.with_stranger:
            own = {"run_id": safe(run.run_id)}
            self.until(lambda: len(pods(self.api, run.dag_id, **own)) == 1, 120, "the task's own new pod")
        else:
            self.until(lambda: "Reattached to pod" in run.log(try_number=2), 120, "reattach")
            self.during_retry = [p.metadata.uid for p in pods(self.api, run.dag_id)]
        self.release()


@scenarios(Scenario("gpu_reattach", "kubernetes", injector=WorkerKiller))
def test_worker_crash_reattaches_to_its_own_pod(scenario_run: ScenarioRun) -> None:
    """A retry after a worker crash takes over the running pod instead of starting a second one."""
    run = scenario_run
    assert isinstance(run.injector, WorkerKiller)
    assert run.state() == "success"
    assert run.injector.during_retry == [run.injector.first.metadata.uid]  # no second pod while it retried
    assert pod_uids(run) == {run.injector.first.metadata.uid}  # nor ever: one pod, attempt 1
    assert run.xcom() == {"shard": "solo", "attempt": 1}
    assert pods(core_api(run.emulator), run.dag_id) == []  # deleted when done, as KPO does


@scenarios(Scenario("gpu_reattach_fixed_name", "kubernetes", injector=lambda: WorkerKiller(stranger=True)))
def test_worker_crash_never_reattaches_to_a_strangers_pod_of_the_same_name(scenario_run: ScenarioRun) -> None:
    """apache/airflow#71743: a pod that only shares the name is someone else's."""
    run = scenario_run
    assert isinstance(run.injector, WorkerKiller) and run.injector.stranger is not None
    assert run.state() == "success"
    stranger = run.injector.stranger
    # The stranger is untouched: still running, not labelled as checked, not deleted.
    current = core_api(run.emulator).read_namespaced_pod(stranger.metadata.name, "default")
    assert current.metadata.uid == stranger.metadata.uid and current.status.phase == "Running"
    assert "already_checked" not in current.metadata.labels
    log = task_log(run.stack, run.dag_id, run.run_id, 2)
    assert f"Not reattaching to pod default/{stranger.metadata.name}" in log and "someone-elses-run" in log

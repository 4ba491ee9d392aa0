"""No orphans, no duplicates: what happens to the GPU pod when the task is killed or its worker dies.

Driven through the shared real Airflow stack (scheduler, LocalExecutor workers, triggerer, REST
API v2) against the Kubernetes emulator, because these paths run in separate processes that
``dag.test()`` does not have: "Mark Failed" reaches a running task through its supervisor's
heartbeat, a deferred task through the triggerer, and a dead worker is noticed by the scheduler.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client, config

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for

pytestmark = pytest.mark.slow

Stack = tuple[AirflowStack, KubernetesEmulator]


@pytest.fixture
def api(airflow_stack: Stack) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(str(airflow_stack[1].kubeconfig_path))
    yield client.CoreV1Api(api_client)
    api_client.close()


def pods(api: client.CoreV1Api, dag_id: str, **labels: str) -> list[Any]:
    selector = ",".join(f"{k}={v}" for k, v in {"dag_id": dag_id, **labels}.items())
    return list(api.list_namespaced_pod("default", label_selector=selector).items)


def running_pods(api: client.CoreV1Api, dag_id: str, count: int) -> list[Any]:
    def probe() -> list[Any] | None:
        found = [p for p in pods(api, dag_id) if p.status.phase == "Running"]
        return found if len(found) >= count else None

    return wait_for(probe, 180, f"{count} running pod(s) of {dag_id}", interval=0.3)


def wait_run(stack: AirflowStack, dag_id: str, run_id: str) -> str:
    return wait_for(
        lambda: (state := stack.run_state(dag_id, run_id)) in ("success", "failed") and state,
        300,
        f"{dag_id} to finish",
        interval=0.5,
    )


def mark_failed(stack: AirflowStack, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> None:
    """What the UI's "Mark Failed" button sends."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
    stack.request("PATCH", path + (f"/{map_index}" if map_index >= 0 else ""), {"new_state": "failed"})


def test_mark_failed_deletes_the_running_pod(airflow_stack: Stack, api: client.CoreV1Api, tmp_path: Path) -> None:
    stack, _ = airflow_stack
    stack.wait_for_dag("gpu_on_kill")
    release = tmp_path / "release"
    run_id = stack.trigger("gpu_on_kill", {"release": str(release)})
    [pod] = running_pods(api, "gpu_on_kill", 1)
    mark_failed(stack, "gpu_on_kill", run_id, "train")
    # on_kill deletes the pod with the policy's grace period: the workload gets SIGTERM, then it is gone.
    wait_for(lambda: not pods(api, "gpu_on_kill"), 120, "the pod to be deleted", interval=0.3)
    assert (tmp_path / "release.sigterm.solo").exists()
    assert wait_run(stack, "gpu_on_kill", run_id) == "failed"
    [ti] = stack.task_instances("gpu_on_kill", run_id)
    assert ti["state"] == "failed" and ti["try_number"] == 1
    assert pod.spec.termination_grace_period_seconds == 5


def test_mark_failed_on_one_mapped_deferred_shard_deletes_only_its_pod(
    airflow_stack: Stack, api: client.CoreV1Api, tmp_path: Path
) -> None:
    """apache/airflow#67296: "Mark Failed" on a mapped deferrable task left its GPU pod running."""
    stack, _ = airflow_stack
    dag_id = "gpu_mapped_deferrable"
    stack.wait_for_dag(dag_id)
    release = tmp_path / "release"
    run_id = stack.trigger(dag_id, {"release": str(release)})
    running_pods(api, dag_id, 3)
    wait_for(
        lambda: [ti["state"] for ti in stack.task_instances(dag_id, run_id)] == ["deferred"] * 3,
        120,
        "the three shards to be deferred",
        interval=0.5,
    )
    # Mark Failed once the triggerer runs shard 1's trigger (it logs to its own file): a trigger the
    # triggerer has not picked up yet is deleted without running any code, ours or KPO's.
    trigger_logs = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=train" / "map_index=1"
    wait_for(lambda: list(trigger_logs.glob("attempt=*.log.trigger.*.log")), 120, "shard 1's trigger to run")
    mark_failed(stack, dag_id, run_id, "train", map_index=1)
    wait_for(lambda: not pods(api, dag_id, map_index="1"), 120, "shard 1's pod to be deleted", interval=0.3)
    assert (tmp_path / "release.sigterm.1").exists()
    assert len(pods(api, dag_id)) == 2  # the other shards keep running
    release.touch()
    assert wait_run(stack, dag_id, run_id) == "failed"  # one shard failed, by hand
    states = {ti["map_index"]: ti["state"] for ti in stack.task_instances(dag_id, run_id)}
    assert states == {0: "success", 1: "failed", 2: "success"}
    assert [stack.xcom(dag_id, run_id, "train", map_index=i) for i in (0, 2)] == [
        {"shard": "0", "attempt": 1},
        {"shard": "2", "attempt": 1},
    ]
    assert not pods(api, dag_id)  # nothing left behind
    assert not (tmp_path / "release.sigterm.0").exists() and not (tmp_path / "release.sigterm.2").exists()


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


def test_worker_crash_reattaches_to_its_own_pod_and_never_to_a_strangers(
    airflow_stack: Stack, api: client.CoreV1Api, tmp_path: Path
) -> None:
    """A retry after a worker crash takes over the running pod instead of starting a second one, and
    refuses a pod that only shares its name (apache/airflow#71743)."""
    stack, _ = airflow_stack
    for dag_id in ("gpu_reattach", "gpu_reattach_fixed_name"):
        stack.wait_for_dag(dag_id)
    release = tmp_path / "release"
    runs = {
        dag_id: stack.trigger(dag_id, {"release": str(release)})
        for dag_id in ("gpu_reattach", "gpu_reattach_fixed_name")
    }
    [ours] = running_pods(api, "gpu_reattach", 1)
    [fixed] = running_pods(api, "gpu_reattach_fixed_name", 1)
    for dag_id, run_id in runs.items():
        [ti] = stack.task_instances(dag_id, run_id)
        kill_worker(stack, ti["id"])

    # While the worker is dead, the fixed-name pod is deleted and another run's pod takes its name.
    api.delete_namespaced_pod(fixed.metadata.name, "default", grace_period_seconds=0)
    wait_for(lambda: not pods(api, "gpu_reattach_fixed_name"), 60, "the pod to go", interval=0.2)
    stranger_labels = {**fixed.metadata.labels, "run_id": "someone-elses-run"}
    stranger = api.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": fixed.metadata.name, "labels": stranger_labels},
            "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["sleep", "600"]}]},
        },
    )

    def retried(dag_id: str) -> bool:
        [ti] = stack.task_instances(dag_id, runs[dag_id])
        return bool(ti["try_number"] == 2 and ti["state"] == "running")

    wait_for(lambda: all(retried(d) for d in runs), 240, "both tasks to run their second try", interval=0.5)
    wait_for(lambda: len(pods(api, "gpu_reattach_fixed_name", run_id=safe(runs["gpu_reattach_fixed_name"]))) == 1,
             120, "the fixed-name task's own new pod", interval=0.3)  # fmt: skip
    wait_for(lambda: "Reattached to pod" in task_log(stack, "gpu_reattach", runs["gpu_reattach"], 2), 120, "reattach")
    assert [p.metadata.uid for p in pods(api, "gpu_reattach")] == [ours.metadata.uid]  # no second pod
    release.touch()
    assert wait_run(stack, "gpu_reattach", runs["gpu_reattach"]) == "success"
    assert wait_run(stack, "gpu_reattach_fixed_name", runs["gpu_reattach_fixed_name"]) == "success"

    # The retry followed the pod it had started: one pod, attempt 1, no second submission.
    assert stack.xcom("gpu_reattach", runs["gpu_reattach"], "train") == {"shard": "solo", "attempt": 1}
    assert pods(api, "gpu_reattach") == []  # deleted when done, as KPO does
    # The stranger is untouched: still running, not labelled as checked, not deleted.
    current = api.read_namespaced_pod(stranger.metadata.name, "default")
    assert current.metadata.uid == stranger.metadata.uid and current.status.phase == "Running"
    assert "already_checked" not in current.metadata.labels
    api.delete_namespaced_pod(stranger.metadata.name, "default", grace_period_seconds=0)
    log = task_log(stack, "gpu_reattach_fixed_name", runs["gpu_reattach_fixed_name"], 2)
    assert "Not reattaching to pod default/fixed-name" in log and "someone-elses-run" in log


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

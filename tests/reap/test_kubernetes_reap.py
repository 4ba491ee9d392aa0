"""The reaper on a cluster: the Kubernetes emulator over HTTP, the official client, Airflow's answers recorded."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.reap.kubernetes import KubernetesResources
from airflow_gpu.reap.reaper import reap, render
from airflow_gpu.reap.rules import InstanceState
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.end_hold import END_HOLD
from airflow_gpu.utils.training_job import JOB_LABEL, job_manifests
from tests.operators.task_context import Ti
from tests.reap.conftest import RUN, RecordedAirflow, pod_marks

NONE = timedelta(0)


@pytest.fixture
def core(kubernetes_emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))


def cluster(emulator: KubernetesEmulator, *namespaces: str) -> KubernetesResources:
    return KubernetesResources.connect(str(emulator.kubeconfig_path), None, namespaces)


def start_pod(core: client.CoreV1Api, name: str, marks: dict[str, Any], grace: int = 30) -> None:
    """A pod with the operator's marks, running on the CPU node until it is killed (SIGTERM ignored,
    so a deletion takes its whole grace period, as a checkpointing training does)."""
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name, **marks},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": grace,
                "containers": [
                    {"name": "base", "image": "busybox", "command": ["sh", "-c", "trap '' TERM; sleep 600"]}
                ],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", 30, f"{name} running")


def pod_or_none(core: client.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_pod(name, "default")
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_an_orphan_is_listed_then_deleted_with_its_grace_and_nothing_else_is_touched(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    failed, running = Ti(1, dag_id="gpu", task_id="failed", run_id=RUN), Ti(1, dag_id="gpu", task_id="runs", run_id=RUN)
    start_pod(core, "failed-task", pod_marks(failed), grace=3)
    start_pod(core, "running-task", pod_marks(running))
    plain = pod_marks(failed)  # a plain KPO pod of the same task: KPO's labels, not our marker
    plain["labels"] = {k: v for k, v in plain["labels"].items() if not k.startswith("airflow-gpu/")}
    start_pod(core, "plain-kpo", plain)
    airflow = RecordedAirflow({
        ("gpu", "failed", RUN, -1): InstanceState("failed", 1),
        ("gpu", "runs", RUN, -1): InstanceState("running", 1),
    })  # fmt: skip

    listed = reap([cluster(kubernetes_emulator)], airflow, grace=NONE)
    assert [(f.resource.name, f.why) for f in listed.orphans] == [("failed-task", "the task instance is failed")]
    assert listed.kept == 1 and not listed.skipped
    assert listed.orphans[0].resource.task.run_id == RUN  # the exact run id, not the shortened label
    assert all(pod_or_none(core, n).metadata.deletion_timestamp is None for n in ("failed-task", "running-task"))
    assert "failed-task" in render(listed) and "ACTION" not in render(listed)

    done = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert [(f.resource.name, f.action) for f in done.orphans] == [("failed-task", "deleted (3 s grace)")]
    terminating = pod_or_none(core, "failed-task")
    assert terminating is None or terminating.metadata.deletion_grace_period_seconds == 3
    wait_for(lambda: pod_or_none(core, "failed-task") is None, 30, "the orphan gone")
    for name in ("running-task", "plain-kpo"):
        pod = pod_or_none(core, name)
        assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Running", name


def test_an_earlier_tries_pod_is_an_orphan_only_once_the_later_try_has_its_own(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    start_pod(core, "shard-try1", pod_marks(Ti(1, dag_id="gpu", task_id="shard", run_id=RUN)), grace=1)
    start_pod(core, "shard-try2", pod_marks(Ti(2, dag_id="gpu", task_id="shard", run_id=RUN)))
    start_pod(core, "adopted-try1", pod_marks(Ti(1, dag_id="gpu", task_id="adopted", run_id=RUN)))
    airflow = RecordedAirflow({
        ("gpu", "shard", RUN, -1): InstanceState("running", 2),
        ("gpu", "adopted", RUN, -1): InstanceState("running", 2),  # try 2 reattached to try 1's pod
    })  # fmt: skip
    report = reap([cluster(kubernetes_emulator, "default")], airflow, delete=True, grace=NONE)
    assert [f.resource.name for f in report.orphans] == ["shard-try1"]
    assert report.orphans[0].why == "made by try 1; try 2 (running) has work of its own"
    assert report.kept == 2
    assert sorted(set(airflow.asked)) == [("gpu", "adopted", RUN, -1), ("gpu", "shard", RUN, -1)]
    assert len(airflow.asked) == 2  # one question per task instance
    wait_for(lambda: pod_or_none(core, "shard-try1") is None, 60, "try 1's pod gone")
    assert pod_or_none(core, "shard-try2").metadata.deletion_timestamp is None
    assert pod_or_none(core, "adopted-try1").metadata.deletion_timestamp is None


def start_training(core: client.CoreV1Api, job: str, service: bool = True) -> Callable[[], list[Any]]:
    """A two-machine training Job of a task try as ``AccelerateTrainOperator`` makes it (``job_manifests``: its
    machines held by the provider's finalizer, as the operator's pod template carries it), with its Service,
    once both machines run; returns what lists its machines, cluster-wide (a namespace's listing may be faulted)."""
    ti = Ti(1, dag_id="gpu", task_id="train", run_id=RUN)
    pod = {
        "metadata": {"name": "train-x", "namespace": "default", **pod_marks(ti), "finalizers": [END_HOLD]},
        "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["sleep", "600"]}]},  # the training
    }
    manifests = job_manifests(pod, job, machines=2, port=29500, base_container="base")
    if service:
        core.create_namespaced_service("default", manifests["service"])
    client.BatchV1Api(core.api_client).create_namespaced_job("default", manifests["job"])
    machines = lambda: core.list_pod_for_all_namespaces(label_selector=f"{JOB_LABEL}={job}").items  # noqa: E731
    wait_for(lambda: sum(p.status.phase == "Running" for p in machines()) == 2, 30, "both machines running")
    return machines


def test_a_training_job_is_deleted_with_its_pods_and_service(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    """Foreground, as the operator deletes it: the API's default for a Job would leave its pods training."""
    start_training(core, "train-1a2b3c4d")
    batch, selector = client.BatchV1Api(core.api_client), f"{JOB_LABEL}=train-1a2b3c4d"
    airflow = RecordedAirflow({("gpu", "train", RUN, -1): InstanceState("success", 1)})

    report = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert [(f.resource.kind, f.resource.name) for f in report.orphans] == [("job", "train-1a2b3c4d")]
    assert report.orphans[0].action == (
        "deleted with its pods (Foreground) and its Service; 2 held machines let go"
    )  # the Job's pod template carries the end hold (utils.training_job): without the release they would stay
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector=selector).items, 60, "the ranks gone")
    wait_for(lambda: not batch.list_namespaced_job("default", label_selector=selector).items, 60, "the Job gone")
    assert not core.list_namespaced_service("default", label_selector=selector).items


def test_a_training_job_whose_machines_cannot_be_listed_is_deleted_and_the_next_reap_lets_them_go(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    """The Job's delete succeeded, so its action says so, with the machines it could not let go beside it
    (not "FAILED": the Job is gone for good). Its held machines, being deleted, are the next reap's."""
    machines = start_training(core, "train-5e6f7a8b", service=False)
    batch, selector = client.BatchV1Api(core.api_client), f"{JOB_LABEL}=train-5e6f7a8b"
    airflow = RecordedAirflow({("gpu", "train", RUN, -1): InstanceState("failed", 1)})
    # the reaper lists cluster-wide; only the Job's own listing of its machines is in the namespace
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", namespace="default", status=403, times=None)

    first = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert [(f.resource.kind, f.action) for f in first.orphans] == [(
        "job", "deleted with its pods (Foreground); its machines not listed (HTTP 403 Forbidden): "
        "reap again to let them go",
    )]  # fmt: skip
    wait_for(lambda: all(p.metadata.deletion_timestamp for p in machines()), 30, "the machines being deleted")
    assert len(machines()) == 2  # held: the end hold keeps them, and the Job (Foreground) with them
    kubernetes_emulator.clear_api_faults()

    second = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    # Running while its grace lasts, Failed once the SIGTERM ended it: held either way
    found = sorted((f.resource.kind, f.resource.status.split(", ")[1], f.action) for f in second.orphans)
    assert found == [("pod", "held (being deleted)", "released: its deletion ends")] * 2
    wait_for(lambda: not machines(), 60, "the machines gone")
    wait_for(lambda: not batch.list_namespaced_job("default", label_selector=selector).items, 60, "the Job gone")
    assert not reap([cluster(kubernetes_emulator)], airflow, grace=NONE).orphans


def test_a_pod_the_provider_s_finalizer_keeps_for_a_dead_try_is_released(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    """A try that died leaves its ended pods with the provider's finalizer (``utils.end_hold``): one that
    succeeded, and one a person or PodGC deleted since, which only the finalizer keeps. Both are orphans of a
    failed task; reaping deletes the first and lets both go, and a live pod of a running task is left."""
    failed, running = Ti(1, dag_id="gpu", task_id="failed", run_id=RUN), Ti(1, dag_id="gpu", task_id="runs", run_id=RUN)
    for name in ("ended", "deleting"):
        marks = pod_marks(failed)
        core.create_namespaced_pod("default", {
            "metadata": {"name": name, **marks, "finalizers": [END_HOLD]},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "base", "image": "busybox", "command": ["true"]}]},
        })  # fmt: skip
        wait_for(lambda n=name: core.read_namespaced_pod(n, "default").status.phase == "Succeeded", 30, "success")
    core.delete_namespaced_pod("deleting", "default")
    assert core.read_namespaced_pod("deleting", "default").metadata.deletion_timestamp is not None  # kept
    start_pod(core, "running-task", pod_marks(running))
    airflow = RecordedAirflow({
        ("gpu", "failed", RUN, -1): InstanceState("failed", 1),
        ("gpu", "runs", RUN, -1): InstanceState("running", 1),
    })  # fmt: skip

    listed = reap([cluster(kubernetes_emulator)], airflow, grace=NONE)
    assert sorted((f.resource.name, f.resource.status) for f in listed.orphans) == [
        ("deleting", "Succeeded, held (being deleted)"), ("ended", "Succeeded, held (ended)"),
    ]  # fmt: skip
    done = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert sorted((f.resource.name, f.action) for f in done.orphans) == [
        ("deleting", "released: its deletion ends"), ("ended", "released: deleted"),
    ]  # fmt: skip
    wait_for(lambda: pod_or_none(core, "ended") is None and pod_or_none(core, "deleting") is None, 30, "both gone")
    assert pod_or_none(core, "running-task").metadata.deletion_timestamp is None


def test_a_training_job_whose_service_cannot_be_deleted_is_still_deleted_and_its_machines_let_go(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    """A Service delete the API refuses (a Role without ``delete`` on services) costs the Service only: the Job
    goes, its held machines are let go first (they would keep it in the API), and the Service, its Job gone, is
    the next reap's."""
    machines = start_training(core, "train-9c0d1e2f")
    batch, selector = client.BatchV1Api(core.api_client), f"{JOB_LABEL}=train-9c0d1e2f"
    airflow = RecordedAirflow({("gpu", "train", RUN, -1): InstanceState("failed", 1)})
    kubernetes_emulator.inject_api_fault(verb="delete", resource="services", status=403, times=1)

    first = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert [(f.resource.kind, f.action) for f in first.orphans] == [(
        "job", "deleted with its pods (Foreground); its Service not deleted (HTTP 403 Forbidden): reap again; "
        "2 held machines let go",
    )]  # fmt: skip
    wait_for(lambda: not machines(), 60, "the machines gone")
    wait_for(lambda: not batch.list_namespaced_job("default", label_selector=selector).items, 60, "the Job gone")
    second = reap([cluster(kubernetes_emulator)], airflow, delete=True, grace=NONE)
    assert [(f.resource.kind, f.action) for f in second.orphans] == [("service", "deleted")]
    assert not core.list_namespaced_service("default", label_selector=selector).items

"""``airflow-gpu reap`` under exactly the ClusterRole of docs/permissions/kubernetes-reaper.yaml, with a
ServiceAccount's token (the Kubernetes emulator's RBAC): it lists every namespace and deletes a finished
task's pod and a training Job with its Service; without the role it may list nothing and deletes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client, config, utils

from airflow_gpu.reap.kubernetes import KubernetesResources, KubernetesUnreachable
from airflow_gpu.reap.reaper import reap
from airflow_gpu.reap.rules import InstanceState
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.kubeconfig import kubeconfig_text
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.training_job import JOB_LABEL, job_manifests
from tests.operators.task_context import Ti
from tests.reap.conftest import RUN, RecordedAirflow, pod_marks
from tests.reap.test_kubernetes_reap import NONE, pod_or_none, start_pod

REAPER = Path(__file__).resolve().parents[2] / "docs" / "permissions" / "kubernetes-reaper.yaml"


def reaper_kubeconfig(emulator: KubernetesEmulator, tmp_path: Path, *, role: bool) -> Path:
    api = config.new_client_from_config(config_file=str(emulator.kubeconfig_path))
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "airflow"}})
    core.create_namespaced_service_account("airflow", {"metadata": {"name": "airflow-gpu-reaper"}})
    if role:
        utils.create_from_yaml(api, str(REAPER))
    token = core.create_namespaced_service_account_token("airflow-gpu-reaper", "airflow", {"spec": {"audiences": []}})
    path = tmp_path / "reaper-kubeconfig"
    path.write_text(kubeconfig_text(api.configuration.host, token=token.status.token))
    return path


@pytest.fixture
def core(kubernetes_emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))


def test_the_reaper_role_lists_everywhere_and_deletes_orphan_pods_jobs_and_services(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api, tmp_path: Path
) -> None:
    kubeconfig = reaper_kubeconfig(kubernetes_emulator, tmp_path, role=True)
    start_pod(core, "failed-task", pod_marks(Ti(1, dag_id="gpu", task_id="failed", run_id=RUN)), grace=1)
    pod = {
        "metadata": {
            "name": "train-x",
            "namespace": "default",
            **pod_marks(Ti(1, dag_id="gpu", task_id="train", run_id=RUN)),
        },
        "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["sleep", "600"]}]},
    }
    manifests = job_manifests(pod, "train-1a2b3c4d", machines=2, port=29500, base_container="base")
    batch = client.BatchV1Api(core.api_client)
    core.create_namespaced_service("default", manifests["service"])
    batch.create_namespaced_job("default", manifests["job"])
    airflow = RecordedAirflow({
        ("gpu", "failed", RUN, -1): InstanceState("failed", 1),
        ("gpu", "train", RUN, -1): InstanceState("success", 1),
    })  # fmt: skip

    report = reap([KubernetesResources.connect(str(kubeconfig), None, ())], airflow, delete=True, grace=NONE)
    assert sorted((f.resource.kind, f.resource.name) for f in report.orphans) == [
        ("job", "train-1a2b3c4d"),
        ("pod", "failed-task"),
    ]
    assert all(f.action and f.action.startswith("deleted") for f in report.orphans), report.orphans
    selector = f"{JOB_LABEL}=train-1a2b3c4d"
    wait_for(lambda: pod_or_none(core, "failed-task") is None, 30, "the orphan pod gone")
    wait_for(lambda: not batch.list_namespaced_job("default", label_selector=selector).items, 60, "the Job gone")
    assert not core.list_namespaced_service("default", label_selector=selector).items


def test_without_the_role_the_reaper_lists_nothing_and_deletes_nothing(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api, tmp_path: Path
) -> None:
    kubeconfig = reaper_kubeconfig(kubernetes_emulator, tmp_path, role=False)
    start_pod(core, "failed-task", pod_marks(Ti(1, dag_id="gpu", task_id="failed", run_id=RUN)), grace=1)
    airflow = RecordedAirflow({("gpu", "failed", RUN, -1): InstanceState("failed", 1)})
    with pytest.raises(KubernetesUnreachable, match="HTTP 403 on namespaces"):
        reap([KubernetesResources.connect(str(kubeconfig), None, ())], airflow, delete=True, grace=NONE)
    assert pod_or_none(core, "failed-task").metadata.deletion_timestamp is None

"""The unmodified ``KubernetesPodOperator`` with volumes and its XCom sidecar (``pods/exec``).

``do_xcom_push=True``: KPO adds the ``airflow-xcom-sidecar`` container and the ``/airflow/xcom``
emptyDir, waits for the base container, execs ``cat /airflow/xcom/return.json`` in the sidecar and
then ``kill -2 $(pgrep -u $(id -u) -f 'sh')`` (cncf-kubernetes 10.25 ``PodManager.extract_xcom``):
its return value is what the base container wrote.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes import volumes
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import wait_for
from tests.testing.kubernetes.official import context, kpo

pytestmark = [
    pytest.mark.slow,  # imports KubernetesPodOperator (seconds)
    pytest.mark.skipif(not volumes.namespaces_available(), reason="needs mount/PID namespaces (root)"),
]


def _execute(emulator: KubernetesEmulator, **arguments: Any) -> Any:
    return kpo(emulator, **arguments).execute(context())


def _pod(core: client.CoreV1Api, selector: str) -> client.V1Pod:
    (pod,) = core.list_namespaced_pod("default", label_selector=selector).items
    return pod


def test_kpo_do_xcom_push_returns_what_the_base_container_wrote(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    result = _execute(
        kubernetes_emulator,
        cmds=[
            "sh",
            "-c",
            'mkdir -p /airflow/xcom && echo \'{"loss": 0.25, "epochs": [1, 2]}\' > /airflow/xcom/return.json',
        ],
        do_xcom_push=True,
        labels={"case": "xcom"},
    )
    assert result == {"loss": 0.25, "epochs": [1, 2]}
    pod = wait_for(
        lambda: (p := _pod(core, "case=xcom")).status.phase == "Succeeded" and p
    )  # the sidecar ends on SIGINT
    statuses = {s.name: s.state.terminated for s in pod.status.container_statuses}
    assert set(statuses) == {"base", "airflow-xcom-sidecar"}
    assert statuses["airflow-xcom-sidecar"].exit_code == 0  # its trap on SIGINT: "exit 0"


def test_kpo_volume_mount_carries_a_file_between_containers(
    kubernetes_emulator: KubernetesEmulator, core: client.CoreV1Api
) -> None:
    from kubernetes.client import models as k8s

    shared = k8s.V1VolumeMount(name="shared", mount_path="/emulated/kpo-shared")
    reader = k8s.V1Container(
        name="reader",
        image="busybox",
        command=[
            "sh",
            "-c",
            "while [ ! -s /emulated/kpo-shared/out ]; do sleep 0.05; done; cat /emulated/kpo-shared/out",
        ],
        volume_mounts=[shared],
    )
    # KPO runs one container of its own; the second comes from a pod template, as users add sidecars
    pod_spec = k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base"), reader]))
    _execute(
        kubernetes_emulator,
        cmds=["sh", "-c", "echo written-by-base > /emulated/kpo-shared/out"],
        volumes=[k8s.V1Volume(name="shared", empty_dir=k8s.V1EmptyDirVolumeSource())],
        volume_mounts=[shared],
        full_pod_spec=pod_spec,
        labels={"case": "volume"},
    )
    pod = _pod(core, "case=volume")
    log = core.read_namespaced_pod_log(pod.metadata.name, "default", container="reader", _preload_content=False)
    assert log.data == b"written-by-base\n"

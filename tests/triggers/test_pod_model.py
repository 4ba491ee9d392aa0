"""The ``V1Pod`` the wait for a pod's end builds from the watch's state reads as the full one does.

``GPUPodTrigger`` turns each change of a pod into the model the official trigger's
``define_pod_container_state`` reads, and builds only the status fields it reads
(``COMPLETION_STATUS``): the statuses below are those a kubelet writes (one base container, a
sidecar beside it, a pull that fails, a pod the kubelet rejects), and each must give the state
the official helper gives from the whole status.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu.triggers.kubernetes import COMPLETION_STATUS, _model

# slow: imports cncf-kubernetes' triggers (seconds of CPU)
pytestmark = pytest.mark.slow

T0, T1 = "2026-11-26T07:00:00Z", "2026-11-26T07:05:00Z"


def condition(kind: str, status: str, reason: str | None = None) -> dict[str, Any]:
    found = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": T0}
    return found | ({"reason": reason} if reason else {})


def container(name: str, state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "0" * 64,
        "containerID": "containerd://" + "1" * 64,
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def terminated(code: int, reason: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": T0, "finishedAt": T1}}


def pod(phase: str, *containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    status = {
        "phase": phase,
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True")],
        "hostIP": "10.0.0.7",
        "hostIPs": [{"ip": "10.0.0.7"}],
        "podIP": "10.244.3.9",
        "podIPs": [{"ip": "10.244.3.9"}],
        "startTime": T0,
        "qosClass": "Burstable",
        **extra,
    }
    if containers:
        status["containerStatuses"] = list(containers)
    return {"metadata": {"name": "shard-0", "namespace": "gpu", "resourceVersion": "42"}, "status": status}


RUNNING = {"running": {"startedAt": T0}}
CASES = {
    "running": (pod("Running", container("base", RUNNING, ready=True)), "running"),
    "ended, phase not yet written": (pod("Running", container("base", terminated(0, "Completed"))), "terminated"),
    "failed, phase not yet written": (pod("Running", container("base", terminated(3, "Error"))), "failed"),
    "succeeded": (pod("Succeeded", container("base", terminated(0, "Completed"))), "terminated"),
    "failed": (pod("Failed", container("base", terminated(137, "OOMKilled"))), "failed"),
    "base ended beside a running sidecar": (
        pod("Running", container("istio-proxy", RUNNING, ready=True), container("base", terminated(0, "Completed"))),
        "terminated",
    ),
    "image pull failing": (
        pod("Pending", container("base", {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}})),
        "waiting",
    ),
    "rejected by the kubelet, no containers": (
        pod("Failed", reason="OutOfnvidia.com/gpu", message="Pod was rejected: insufficient nvidia.com/gpu"),
        "failed",
    ),
    "scheduled, no container status yet": (pod("Pending"), "undefined"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_completion_wait_reads_the_state_the_whole_status_gives(case: str) -> None:
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    official = KubernetesPodTrigger(
        pod_name="shard-0", pod_namespace="gpu", trigger_start_time=None,  # type: ignore[arg-type]
        base_container_name="base",
    )  # fmt: skip
    found, expected = CASES[case]
    trimmed = _model(found, COMPLETION_STATUS)
    assert official.define_pod_container_state(trimmed) == expected
    assert official.define_pod_container_state(_model(found)) == expected
    assert (trimmed.metadata.name, trimmed.metadata.namespace) == ("shard-0", "gpu")


def test_the_trimmed_model_leaves_out_what_the_wait_does_not_read() -> None:
    found = _model(CASES["succeeded"][0], COMPLETION_STATUS)
    assert found.status.conditions is None and found.status.pod_ip is None and found.status.start_time is None
    assert found.status.container_statuses[0].state.terminated.exit_code == 0
    whole = _model(CASES["succeeded"][0])
    assert [c.type for c in whole.status.conditions] == ["PodScheduled", "Initialized"]

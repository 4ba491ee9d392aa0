"""The program a container could not start with, in every runtime's words (``spot.start_failure``), and the
policy's reading of a refusal at admission (``spot.admission``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu.spot import admission
from airflow_gpu.spot.classifier import Outcome
from airflow_gpu.spot.policy import Placement, SpotPolicy, next_step
from airflow_gpu.spot.start_failure import missing_program

CONTAINERD = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    'unable to start container process: exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown'
)
RUNC_1_2 = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    'unable to start container process: error during container init: exec: "python3": executable file not '
    "found in $PATH: unknown"
)
CRIO_RUNC = (
    'container create failed: time="2025-04-16T20:10:28+08:00" level=error msg="runc create failed: unable to '
    'start container process: exec: \\"/bin/sh\\": stat /bin/sh: no such file or directory"\n'
)
CRIO_CRUN = "executable file `/bin/sh` not found in $PATH: No such file or directory\n"
DOCKER = 'OCI runtime create failed: container_linux.go:380: starting container process caused: exec: "/bin/sh": ' \
         "stat /bin/sh: no such file or directory: unknown"  # fmt: skip


def pod(state: dict[str, Any], where: str = "state", phase: str = "Failed") -> dict[str, Any]:
    status = {"name": "base", where: state, **({"state": {"waiting": {"reason": "x"}}} if where != "state" else {})}
    return {"status": {"phase": phase, "containerStatuses": [status]}}


@pytest.mark.parametrize(
    ("shape", "program"),
    [
        (pod({"terminated": {"reason": "StartError", "exitCode": 128, "message": CONTAINERD}}), "/bin/sh"),
        (pod({"terminated": {"reason": "StartError", "exitCode": 128, "message": RUNC_1_2}}), "python3"),
        (pod({"terminated": {"reason": "StartError", "message": CONTAINERD}}, "lastState", "Running"), "/bin/sh"),
        (pod({"waiting": {"reason": "CreateContainerError", "message": CRIO_RUNC}}, phase="Pending"), "/bin/sh"),
        (pod({"waiting": {"reason": "CreateContainerError", "message": CRIO_CRUN}}, phase="Pending"), "/bin/sh"),
        (pod({"terminated": {"reason": "ContainerCannotRun", "exitCode": 127, "message": DOCKER}}), "/bin/sh"),
    ],
)
def test_every_runtimes_refusal_names_the_program(shape: dict[str, Any], program: str) -> None:
    assert missing_program(shape, "base") == program
    assert missing_program(shape, "sidecar") is None


@pytest.mark.parametrize(
    "state",
    [
        {"terminated": {"reason": "Error", "exitCode": 127, "message": CONTAINERD}},  # the app's own exit 127
        {"terminated": {"reason": "StartError", "exitCode": 128, "message": "failed to mount /data: permission"}},
        {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
    ],
)
def test_other_ends_name_no_program(state: dict[str, Any]) -> None:
    assert missing_program(pod(state), "base") is None


def test_a_quota_refusal_is_decided_as_a_refusal_not_as_a_broken_image() -> None:
    message = ('pods "t" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, '
               "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4")  # fmt: skip
    result = admission.refused_pod(admission.read(message, "ml"))
    assert result.outcome is Outcome.INFRASTRUCTURE and not result.interrupted
    assert "in namespace ml (ResourceQuota gpu-quota)" in result.message
    decision = next_step(SpotPolicy(), result, Placement(0, "spot"), 0, 2, "spot")
    assert decision.action == "fail" and decision.retry_allowed and not decision.counts_as_interruption
    assert "kubectl describe resourcequota gpu-quota -n ml" in decision.message
    assert "not a preemption" in decision.message and "check the image" not in decision.message

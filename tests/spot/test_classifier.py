"""The classifier against the status shapes Kubernetes reports (DESIGN.md, Kubernetes facts)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu.spot.classifier import Outcome, classify_pod

SHUTDOWN = "Pod was terminated in response to imminent node shutdown."


def pod(
    phase: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    status["containerStatuses"] = [{"name": "base", "state": state} for state in containers or []]
    return {"metadata": {"name": "p"}, "status": status}


def terminated(code: int, reason: str = "Error", message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        state["message"] = message
    return {"terminated": state}


CASES: list[tuple[str, dict[str, Any] | None, Outcome, str, bool]] = [
    ("success", pod("Succeeded", containers=[terminated(0, "Completed")]), Outcome.SUCCEEDED, "Succeeded", False),
    (
        "spot reclaim (graceful node shutdown)",
        pod(
            "Failed",
            reason="Terminated",
            message=SHUTDOWN,
            conditions=[
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": SHUTDOWN}
            ],
            containers=[terminated(143)],
        ),
        Outcome.PREEMPTED,
        "TerminationByKubelet",
        True,
    ),
    (
        "node shutdown before 1.26",
        pod(
            "Failed",
            reason="Shutdown",
            message="Pod was terminated in response to imminent node shutdown.",
            containers=[terminated(137)],
        ),
        Outcome.PREEMPTED,
        "Shutdown",
        True,
    ),
    (
        "scheduler preemption",
        pod("Failed", conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]),
        Outcome.PREEMPTED,
        "PreemptionByScheduler",
        True,
    ),
    (
        "taint manager",
        pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]),
        Outcome.PREEMPTED,
        "DeletionByTaintManager",
        True,
    ),
    (
        "pod GC after node loss",
        pod("Failed", conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}]),
        Outcome.PREEMPTED,
        "DeletionByPodGC",
        True,
    ),
    (
        "drain",
        pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]),
        Outcome.EVICTED,
        "EvictionByEvictionAPI",
        True,
    ),
    (
        "node-pressure eviction",
        pod("Failed", reason="Evicted", message="The node was low on resource: memory."),
        Outcome.EVICTED,
        "Evicted",
        True,
    ),
    ("pod deleted before it started (#59626)", None, Outcome.PREEMPTED, "PodDeleted", True),
    (
        "image pull",
        pod("Pending", containers=[{"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}]),
        Outcome.INFRASTRUCTURE,
        "ImagePullBackOff",
        False,
    ),
    (
        "missing binary",
        pod("Failed", containers=[terminated(127, "ContainerCannotRun", 'exec: "x": not found')]),
        Outcome.INFRASTRUCTURE,
        "ContainerCannotRun",
        False,
    ),
    (
        "OOMKilled is the application's",
        pod("Failed", containers=[terminated(137, "OOMKilled")]),
        Outcome.APPLICATION,
        "OOMKilled",
        False,
    ),
    ("non-zero exit", pod("Failed", containers=[terminated(3)]), Outcome.APPLICATION, "Error", False),
    (
        "unschedulable",
        pod(
            "Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        ),
        Outcome.UNSCHEDULABLE,
        "Unschedulable",
        False,
    ),
    ("running", pod("Running"), Outcome.RUNNING, "Running", False),
    (
        "admission error",
        pod("Failed", reason="UnexpectedAdmissionError", message="Allocate failed due to no healthy devices"),
        Outcome.INFRASTRUCTURE,
        "UnexpectedAdmissionError",
        True,
    ),
]


@pytest.mark.parametrize(("name", "shape", "outcome", "reason", "interrupted"), CASES, ids=[c[0] for c in CASES])
def test_classify(name: str, shape: dict[str, Any] | None, outcome: Outcome, reason: str, interrupted: bool) -> None:
    result = classify_pod(shape)
    assert (result.outcome, result.reason, result.interrupted) == (outcome, reason, interrupted)


def test_application_failure_keeps_the_exit_code_and_says_which_container() -> None:
    result = classify_pod(pod("Failed", containers=[terminated(3)]))
    assert result.exit_code == 3
    assert result.message == "container base failed: exit code 3"
    oom = classify_pod(pod("Failed", containers=[terminated(137, "OOMKilled")]))
    assert oom.message == "container base failed: out of memory (OOMKilled)"


def test_the_emulators_preemption_is_classified_as_preempted() -> None:
    """The shape our Kubernetes emulator produces, taken from its own code path."""
    from airflow_gpu.testing.kubernetes.cluster_state import NODE_SHUTDOWN_MESSAGE

    shape = pod("Failed", reason="Terminated", message=NODE_SHUTDOWN_MESSAGE)
    assert classify_pod(shape).outcome is Outcome.PREEMPTED

"""The classifier against the status shapes Kubernetes reports (DESIGN.md, Kubernetes facts).

Each payload names where its shape comes from: the Kubernetes source that writes it
(``kubernetes/kubernetes``), the Kubernetes documentation (``kubernetes/website``), or the
official cncf-kubernetes provider's tests (``apache/airflow``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.spot.classifier import (
    Classification,
    Outcome,
    classify_deleted_pod,
    classify_pod,
    completed_before_deletion,
    disrupted_by,
    ended_on_a_deletion_signal,
)
from airflow_gpu.spot.policy import Placement, SpotPolicy, next_step

# kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager.go: nodeShutdownReason, nodeShutdownMessage
SHUTDOWN = "Pod was terminated in response to imminent node shutdown."
# kubernetes pkg/kubelet/eviction/helpers.go evictionMessage: nodeLowMessageFmt + thresholdMetMessageFmt
# + containerMessageFmt, each ending in ". " (the trailing space is the kubelet's)
MEMORY_PRESSURE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
    "Container base was using 2Gi, request is 1Gi, has larger consumption of memory. "
)
# the same evictionMessage for the nodefs.available signal (the node's disk, not the pod's limit)
DISK_PRESSURE = "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 4Gi. "
# kubernetes pkg/kubelet/eviction/helpers.go: podEphemeralStorageMessageFmt, containerEphemeralStorageMessageFmt
# (Go %q), emptyDirMessageFmt (Go %q, %q); eviction_manager.go localStorageEviction passes no condition
POD_STORAGE = "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. "
CONTAINER_STORAGE = 'Container base exceeded its local ephemeral storage limit "1Gi". '
EMPTYDIR_STORAGE = 'Usage of EmptyDir volume "scratch" exceeds the limit "1Gi". '
OWN_STORAGE_MESSAGES = (POD_STORAGE, CONTAINER_STORAGE, EMPTYDIR_STORAGE)


def pod(
    phase: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    status["containerStatuses"] = [{"name": "base", "state": state} for state in containers or []]
    shape: dict[str, Any] = {"metadata": {"name": "p", **(metadata or {})}, "status": status, "spec": {}}
    if node:
        shape["spec"]["nodeName"] = node
    return shape


def terminated(
    code: int, reason: str = "Error", message: str | None = None, finished: str | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        state["message"] = message
    if finished:
        state["finishedAt"] = finished
    return {"terminated": state}


def disruption(reason: str, message: str | None = None) -> dict[str, Any]:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    if message:
        condition["message"] = message
    return condition


CASES: list[tuple[str, dict[str, Any] | None, Outcome, str, bool]] = [
    ("success", pod("Succeeded", containers=[terminated(0, "Completed")]), Outcome.SUCCEEDED, "Succeeded", False),
    (
        # nodeshutdown_manager.go killPods (>= 1.26): phase Failed, reason Terminated, and
        # DisruptionTarget TerminationByKubelet with nodeShutdownMessage; docs: concepts/workloads/pods/
        # disruptions.md "Pod disruption conditions"
        "spot reclaim (graceful node shutdown)",
        pod(
            "Failed",
            reason="Terminated",
            message=SHUTDOWN,
            conditions=[disruption("TerminationByKubelet", SHUTDOWN)],
            containers=[terminated(143)],
        ),
        Outcome.PREEMPTED,
        "TerminationByKubelet",
        True,
    ),
    (
        # nodeshutdown_manager_linux.go in Kubernetes 1.20/1.21: nodeShutdownReason = "Shutdown",
        # nodeShutdownMessage = "Node is shutting, evicting pods" (kubernetes/kubernetes#102820)
        "node shutdown before 1.22",
        pod("Failed", reason="Shutdown", message="Node is shutting, evicting pods", containers=[terminated(137)]),
        Outcome.PREEMPTED,
        "Shutdown",
        True,
    ),
    (
        # nodeshutdown_manager.go: nodeShutdownNotAdmittedReason / nodeShutdownNotAdmittedMessage
        "rejected while the node shuts down",
        pod("Failed", reason="NodeShutdown", message="Pod was rejected as the node is shutting down."),
        Outcome.PREEMPTED,
        "NodeShutdown",
        True,
    ),
    (
        # scheduler framework/preemption: DisruptionTarget PreemptionByScheduler,
        # "<schedulerName>: preempting to accommodate a higher priority pod"
        "scheduler preemption",
        pod(
            "Failed",
            conditions=[
                disruption(
                    "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"
                )
            ],
        ),
        Outcome.PREEMPTED,
        "PreemptionByScheduler",
        True,
    ),
    (
        # pkg/kubelet/preemption/preemption.go: reason events.PreemptContainer ("Preempting"), message
        # "Preempted in order to admit critical pod", condition "Pod was preempted by Kubelet to
        # accommodate a critical pod."; cncf-kubernetes test_classify_pod_failure.py lists "Preempting" as infra
        "kubelet preemption for a critical pod",
        pod(
            "Failed",
            reason="Preempting",
            message="Preempted in order to admit critical pod",
            conditions=[
                disruption("TerminationByKubelet", "Pod was preempted by Kubelet to accommodate a critical pod.")
            ],
        ),
        Outcome.PREEMPTED,
        "TerminationByKubelet",
        True,
    ),
    (
        # pkg/controller/tainteviction/taint_eviction.go: "Taint manager: deleting due to NoExecute taint"
        "taint manager",
        pod(
            "Running",
            conditions=[disruption("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")],
        ),
        Outcome.PREEMPTED,
        "DeletionByTaintManager",
        True,
    ),
    (
        # pkg/controller/podgc/gc_controller.go gcOrphaned: "PodGC: node no longer exists"
        "pod GC after node loss",
        pod("Failed", conditions=[disruption("DeletionByPodGC", "PodGC: node no longer exists")]),
        Outcome.PREEMPTED,
        "DeletionByPodGC",
        True,
    ),
    (
        # pkg/registry/core/pod/storage/eviction.go: EvictionByEvictionAPI, "Eviction API: evicting"
        "drain",
        pod("Running", conditions=[disruption("EvictionByEvictionAPI", "Eviction API: evicting")]),
        Outcome.EVICTED,
        "EvictionByEvictionAPI",
        True,
    ),
    (
        # eviction_manager.go synchronize (>= 1.26): DisruptionTarget TerminationByKubelet whose message
        # is evictionMessage; evictPod: phase Failed, reason "Evicted", the same message
        "node-pressure eviction with DisruptionTarget",
        pod(
            "Failed",
            reason="Evicted",
            message=MEMORY_PRESSURE,
            conditions=[disruption("TerminationByKubelet", MEMORY_PRESSURE)],
            containers=[terminated(137)],
        ),
        Outcome.EVICTED,
        "Evicted",
        True,
    ),
    (
        # cncf-kubernetes tests/unit/cncf/kubernetes/executors/test_classify_pod_failure.py
        # test_end_to_end_evicted_pod_is_infra: V1PodStatus(phase="Failed", reason="Evicted",
        # message="The node was low on resource: memory.") (no condition: before 1.26)
        "node-pressure eviction without DisruptionTarget",
        pod("Failed", reason="Evicted", message="The node was low on resource: memory."),
        Outcome.EVICTED,
        "Evicted",
        True,
    ),
    (
        # the condition arrives before the terminal status: TerminationByKubelet + evictionMessage only
        "node-pressure eviction still terminating",
        pod("Running", conditions=[disruption("TerminationByKubelet", MEMORY_PRESSURE)]),
        Outcome.EVICTED,
        "TerminationByKubelet",
        True,
    ),
    (
        # evictionMessage for nodefs.available: the node's disk is full, not the pod's own limit
        "node disk pressure",
        pod(
            "Failed",
            reason="Evicted",
            message=DISK_PRESSURE,
            conditions=[disruption("TerminationByKubelet", DISK_PRESSURE)],
        ),
        Outcome.EVICTED,
        "Evicted",
        True,
    ),
    (
        # eviction_manager.go Admit: Reason "Evicted", nodeConditionMessageFmt "The node had condition: %v. "
        "rejected under node pressure",
        pod("Failed", reason="Evicted", message="The node had condition: [DiskPressure]. "),
        Outcome.EVICTED,
        "Evicted",
        True,
    ),
    *[
        (
            f"own ephemeral-storage limit: {text.split(' ')[0]}",
            pod("Failed", reason="Evicted", message=text, containers=[terminated(137)]),
            Outcome.APPLICATION,
            "EphemeralStorageLimitExceeded",
            False,
        )
        for text in OWN_STORAGE_MESSAGES
    ],
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
        # cncf-kubernetes test_classify_pod_failure.py: a container OOMKilled against its own limit is
        # the application's (test_end_to_end_oomkilled_pod_is_application)
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
        # pkg/kubelet/lifecycle/predicate.go: UnexpectedAdmissionError
        "admission error",
        pod("Failed", reason="UnexpectedAdmissionError", message="Allocate failed due to no healthy devices"),
        Outcome.INFRASTRUCTURE,
        "UnexpectedAdmissionError",
        True,
    ),
    # pkg/kubelet/lifecycle/predicate.go Admit: reason InsufficientResourcePrefix ("OutOf") + the
    # resource name, message InsufficientResourceError.Error()
    *[
        (
            f"admission: {resource}",
            pod(
                "Failed",
                reason=f"OutOf{resource}",
                message=f"Node didn't have enough resource: {resource}, requested: 1, used: 0, capacity: 0",
            ),
            Outcome.INFRASTRUCTURE,
            f"OutOf{resource}",
            True,
        )
        for resource in (
            "nvidia.com/gpu",
            "amd.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "aws.amazon.com/neuron",
            "cpu",
            "memory",
        )
    ],
    (
        "failed with no container statuses and an unknown reason",
        pod("Failed", reason="SomethingNew", message="a reason this table has never seen"),
        Outcome.UNKNOWN,
        "SomethingNew",
        False,
    ),
    (
        # pod-lifecycle docs: Unknown, "typically due to an error in communicating with the node"
        "phase Unknown",
        pod("Unknown"),
        Outcome.UNKNOWN,
        "Unknown",
        False,
    ),
    (
        # kubelet active_deadline.go: reason "DeadlineExceeded", containers killed by the kubelet
        "an unknown pod-level reason with containers killed by a signal",
        pod(
            "Failed",
            reason="DeadlineExceeded",
            message="Pod was active on the node longer than the specified deadline",
            containers=[terminated(137)],
        ),
        Outcome.UNKNOWN,
        "DeadlineExceeded",
        False,
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


def test_node_pressure_is_not_a_spot_interruption_but_is_resubmitted() -> None:
    """The same TerminationByKubelet reason: only the node shutdown counts as a reclaim."""
    pressure = classify_pod(
        pod(
            "Failed",
            reason="Evicted",
            message=MEMORY_PRESSURE,
            conditions=[disruption("TerminationByKubelet", MEMORY_PRESSURE)],
        )
    )
    reclaim = classify_pod(
        pod("Failed", reason="Terminated", message=SHUTDOWN, conditions=[disruption("TerminationByKubelet", SHUTDOWN)])
    )
    assert (pressure.outcome, reclaim.outcome) == (Outcome.EVICTED, Outcome.PREEMPTED)
    assert pressure.interrupted and reclaim.interrupted
    assert pressure.message == MEMORY_PRESSURE.strip()


def test_own_ephemeral_storage_eviction_says_what_to_change() -> None:
    result = classify_pod(pod("Failed", reason="Evicted", message=CONTAINER_STORAGE))
    assert result.message.startswith("the kubelet evicted the pod for exceeding its own ephemeral-storage limit")
    assert CONTAINER_STORAGE.strip() in result.message
    assert "resources.limits.ephemeral-storage" in result.message
    decision = next_step(SpotPolicy(), result, Placement(0, "spot"), 0, 1, "spot")
    assert (decision.action, decision.retry_allowed) == ("fail", False)


def test_out_of_resource_names_the_resource() -> None:
    result = classify_pod(pod("Failed", reason="OutOfnvidia.com/gpu"))
    assert result.message == "the kubelet rejected the pod at admission: its node had no free nvidia.com/gpu"


@pytest.mark.parametrize(
    "result",
    [
        classify_pod(pod("Failed", reason="SomethingNew")),
        classify_pod(pod("Unknown")),
        classify_deleted_pod(pod("Running", node="gpu-spot-1"), node_exists=True),
    ],
    ids=["unknown shape", "phase Unknown", "deleted through the API"],
)
def test_policy_fails_unknown_and_deleted_retryably(result: Classification) -> None:
    """spot/policy.py's last branch: a ``fail`` that lets Airflow's retries run, never a resubmit."""
    assert result.outcome in (Outcome.UNKNOWN, Outcome.DELETED)
    assert not result.interrupted
    for capacity in ("spot", "on-demand", None):
        decision = next_step(SpotPolicy(), result, Placement(0, capacity), 0, 2, capacity)
        assert (decision.action, decision.retry_allowed, decision.counts_as_interruption) == ("fail", True, False)


# --- a pod that is gone ---------------------------------------------------------------------

RUNNING_ON_NODE = pod("Running", containers=[{"running": {"startedAt": "2026-01-01T10:00:00Z"}}], node="gpu-spot-1")


def test_deleted_while_its_node_exists_is_a_deletion_not_an_interruption() -> None:
    result = classify_deleted_pod(RUNNING_ON_NODE, node_exists=True)
    assert (result.outcome, result.reason, result.interrupted) == (Outcome.DELETED, "Deleted", False)
    assert "gpu-spot-1 still exists" in result.message


def test_deleted_with_its_node_is_preempted() -> None:
    result = classify_deleted_pod(RUNNING_ON_NODE, node_exists=False)
    assert (result.outcome, result.reason, result.interrupted) == (Outcome.PREEMPTED, "NodeDeleted", True)


def test_deleted_when_the_node_is_not_known_stays_pod_deleted() -> None:
    assert classify_deleted_pod(RUNNING_ON_NODE, node_exists=None) == classify_pod(None)
    assert classify_deleted_pod(None, node_exists=None) == classify_pod(None)


@pytest.mark.parametrize(
    ("condition", "outcome"),
    [
        (disruption("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"), Outcome.PREEMPTED),
        (
            disruption("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"),
            Outcome.PREEMPTED,
        ),
        (disruption("DeletionByPodGC", "PodGC: node no longer exists"), Outcome.PREEMPTED),
        (disruption("EvictionByEvictionAPI", "Eviction API: evicting"), Outcome.EVICTED),
    ],
)
def test_deleted_after_a_disruption_condition_is_an_interruption(condition: dict[str, Any], outcome: Outcome) -> None:
    last_seen = pod("Running", conditions=[condition], node="gpu-spot-1")
    result = classify_deleted_pod(last_seen, node_exists=True)
    assert (result.outcome, result.interrupted) == (outcome, True)


def test_deleted_after_it_failed_by_itself_keeps_the_failure() -> None:
    last_seen = pod("Failed", containers=[terminated(3)], node="gpu-spot-1")
    assert classify_deleted_pod(last_seen, node_exists=True).outcome is Outcome.APPLICATION


def test_a_terminal_pod_stopped_by_a_plain_delete_is_deleted() -> None:
    """``deletionTimestamp`` is the DELETE plus the grace period (apiserver rest.BeforeDelete);
    a container that stopped after the DELETE was stopped by it, whatever its exit code."""
    deleting = {"deletionTimestamp": "2026-01-01T10:00:30Z", "deletionGracePeriodSeconds": 30}
    killed = pod("Failed", containers=[terminated(143, finished="2026-01-01T10:00:05Z")], metadata=deleting)
    assert classify_pod(killed).outcome is Outcome.DELETED
    earlier = pod("Failed", containers=[terminated(3, finished="2026-01-01T09:59:00Z")], metadata=deleting)
    assert classify_pod(earlier).outcome is Outcome.APPLICATION  # it had failed before anyone deleted it


def test_a_pod_gone_after_its_workload_exited_0_before_the_drain_succeeded() -> None:
    """Issue 26: a drain (Eviction API: ``DisruptionTarget`` ``EvictionByEvictionAPI``, then the delete) of a pod
    whose base container had already exited 0 (a sidecar kept it Running) took nothing from the run."""
    drained = {
        **disruption("EvictionByEvictionAPI", "Eviction API: evicting"),
        "lastTransitionTime": "2026-01-01T10:00:10Z",
    }
    deleting = {"deletionTimestamp": "2026-01-01T10:00:40Z", "deletionGracePeriodSeconds": 30}
    done = pod("Running", conditions=[drained], metadata=deleting, node="n",
               containers=[terminated(0, "Completed", finished="2026-01-01T10:00:02Z")])  # fmt: skip
    assert completed_before_deletion(done, "base")
    assert classify_deleted_pod(done, False, "base").outcome is Outcome.SUCCEEDED
    assert classify_deleted_pod(done, False).interrupted  # without the container: the eviction, as before
    assert disrupted_by(done) == "DisruptionTarget EvictionByEvictionAPI: Eviction API: evicting"


def test_a_workload_that_exited_0_on_the_drains_sigterm_was_preempted() -> None:
    """A workload that checkpoints and exits 0 on SIGTERM did not finish: an exit at or after the disruption or
    the DELETE (timestamps have whole seconds) is the drain's, an interruption to run again."""
    drained = {
        **disruption("EvictionByEvictionAPI", "Eviction API: evicting"),
        "lastTransitionTime": "2026-01-01T10:00:10Z",
    }
    on_sigterm = pod("Failed", conditions=[drained], node="n",
                     containers=[terminated(0, "Completed", finished="2026-01-01T10:00:11Z")])  # fmt: skip
    assert not completed_before_deletion(on_sigterm, "base")
    assert classify_deleted_pod(on_sigterm, False, "base").outcome is Outcome.EVICTED  # an interruption
    deleting = {"deletionTimestamp": "2026-01-01T10:00:30Z", "deletionGracePeriodSeconds": 30}
    by_delete = pod("Running", metadata=deleting, node="n", containers=[terminated(0, finished="2026-01-01T10:00:01Z")])
    assert not completed_before_deletion(by_delete, "base")
    undated = pod("Running", conditions=[disruption("EvictionByEvictionAPI")], containers=[terminated(0)])
    assert not completed_before_deletion(undated, "base")  # disrupted at an unknown moment: cannot tell
    assert not completed_before_deletion(pod("Running", containers=[terminated(1)]), "base")
    assert not completed_before_deletion(None, "base")


def test_a_workload_that_exited_0_on_a_kubelets_shutdown_without_disruptiontarget_was_preempted() -> None:
    """A kubelet before 1.26 (or without PodDisruptionConditions) ends a pod on a graceful node shutdown or under
    node pressure with phase Failed and reason ``Terminated`` / ``Evicted`` and no ``DisruptionTarget``
    (nodeshutdown_manager.go, eviction_manager.go); a workload that checkpoints and exits 0 on that SIGTERM
    did not finish, though nothing dates the kill, and PodGC's later DELETE of the pod comes after its exit."""
    for reason, message, outcome in (("Terminated", SHUTDOWN, Outcome.PREEMPTED),
                                     ("Evicted", MEMORY_PRESSURE, Outcome.EVICTED)):  # fmt: skip
        killed = pod("Failed", reason=reason, message=message, node="n",
                     containers=[terminated(0, "Completed", finished="2026-01-01T10:00:11Z")])  # fmt: skip
        assert not completed_before_deletion(killed, "base"), reason
        assert classify_deleted_pod(killed, False, "base").outcome is outcome
        collected = {**killed, "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T10:05:00Z",
                                            "deletionGracePeriodSeconds": 0}}  # fmt: skip
        assert not completed_before_deletion(collected, "base"), reason  # PodGC's DELETE after the node went
    dated = {**disruption("TerminationByKubelet", SHUTDOWN), "lastTransitionTime": "2026-01-01T10:00:20Z"}
    ended_first = pod("Failed", reason="Terminated", message=SHUTDOWN, conditions=[dated], node="n",
                      containers=[terminated(0, "Completed", finished="2026-01-01T10:00:02Z")])  # fmt: skip
    assert completed_before_deletion(ended_first, "base")  # >= 1.26: the condition dates the shutdown


# --- properties -----------------------------------------------------------------------------

REASONS = st.sampled_from(
    [None, "Evicted", "Terminated", "Shutdown", "NodeShutdown", "Preempting", "OutOfcpu", "OutOfnvidia.com/gpu",
     "UnexpectedAdmissionError", "DeadlineExceeded", "SomethingNew"]
)  # fmt: skip
MESSAGES = st.one_of(
    st.none(), st.text(max_size=40), st.sampled_from([SHUTDOWN, MEMORY_PRESSURE, DISK_PRESSURE, *OWN_STORAGE_MESSAGES])
)
CONDITIONS = st.lists(
    st.builds(
        lambda kind, status, reason, message: {"type": kind, "status": status, "reason": reason, "message": message},
        st.sampled_from(["DisruptionTarget", "PodScheduled", "Ready"]),
        st.sampled_from(["True", "False"]),
        st.sampled_from(
            [
                "TerminationByKubelet",
                "PreemptionByScheduler",
                "DeletionByTaintManager",
                "DeletionByPodGC",
                "EvictionByEvictionAPI",
                "Unschedulable",
                "Other",
            ]
        ),
        MESSAGES,
    ),
    max_size=3,
)
STATES = st.lists(
    st.one_of(
        st.builds(
            terminated, st.integers(0, 255), st.sampled_from(["Error", "Completed", "OOMKilled", "ContainerCannotRun"])
        ),
        st.just({"running": {"startedAt": "2026-01-01T10:00:00Z"}}),
        st.just({"waiting": {"reason": "ContainerCreating"}}),
    ),
    max_size=3,
)
PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"])


@st.composite
def pods(
    draw: st.DrawFn, phase: st.SearchStrategy[str] = PHASES, message: st.SearchStrategy[Any] = MESSAGES
) -> dict[str, Any]:
    return pod(
        draw(phase),
        reason=draw(REASONS),
        message=draw(message),
        conditions=draw(CONDITIONS),
        containers=draw(STATES),
    )


@given(pods(phase=st.just("Succeeded")))
def test_any_succeeded_pod_succeeded(shape: dict[str, Any]) -> None:
    assert classify_pod(shape).outcome is Outcome.SUCCEEDED


@given(pods(message=st.sampled_from(OWN_STORAGE_MESSAGES)))
def test_no_pod_over_its_own_storage_limit_is_ever_interrupted(shape: dict[str, Any]) -> None:
    result = classify_pod(shape)
    assert not result.interrupted
    assert result.outcome in (Outcome.SUCCEEDED, Outcome.APPLICATION)


@given(pods(message=st.sampled_from([MEMORY_PRESSURE, DISK_PRESSURE, "The node had condition: [MemoryPressure]. "])))
def test_node_pressure_is_never_a_preemption(shape: dict[str, Any]) -> None:
    shape["status"]["reason"] = "Evicted"
    assert classify_pod(shape).outcome is not Outcome.PREEMPTED


@given(pods())
def test_application_only_on_the_workloads_own_evidence(shape: dict[str, Any]) -> None:
    """APPLICATION (no retries) needs a container that failed by itself or the pod's own storage limit."""
    result = classify_pod(shape)
    if result.outcome is Outcome.APPLICATION:
        status = shape["status"]
        own_storage = any(text in (status.get("message") or "") for text in OWN_STORAGE_MESSAGES) or any(
            text in (c.get("message") or "") for c in status["conditions"] for text in OWN_STORAGE_MESSAGES
        )
        failed = [
            s["terminated"]
            for s in (c["state"] for c in status["containerStatuses"])
            if s.get("terminated", {}).get("exitCode")
        ]
        assert own_storage or failed


@given(pods(), st.sampled_from([True, False, None]))
def test_a_gone_pod_is_never_running(shape: dict[str, Any], node_exists: bool | None) -> None:
    assert classify_deleted_pod(shape, node_exists).outcome not in (Outcome.RUNNING, Outcome.UNSCHEDULABLE)


def test_a_node_being_taken_away_is_not_there_to_stay() -> None:
    """Node shapes as the API returns them: cordoned (``kubectl drain``), tainted by Karpenter before a
    spot-interruption drain or by cluster-autoscaler before a scale-down, or not Ready."""
    from airflow_gpu.spot.classifier import node_stays

    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_stays({"spec": {}, **ready})
    assert not node_stays({"spec": {"unschedulable": True}, **ready})
    assert not node_stays({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}, **ready})
    autoscaler = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}
    assert not node_stays({"spec": {"taints": [autoscaler]}, **ready})
    assert not node_stays({"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})


def stopped_pod(end: dict[str, Any] | None, *, deleting: bool = True, disrupted_at: str | None = None,
                finished_at: str = "2026-11-27T04:00:10Z") -> dict[str, Any]:  # fmt: skip
    """A ``Succeeded`` pod as the provider's finalizer keeps it: its base container's termination message holds
    the profiler's end line (``end``; None: no message, unprofiled)."""
    terminated: dict[str, Any] = {"exitCode": 0, "reason": "Completed", "finishedAt": finished_at}
    if end is not None:
        terminated["message"] = "::airflow-gpu-result::1\n::airflow-gpu-end::" + json.dumps(end)
    pod: dict[str, Any] = {
        "metadata": {"name": "p", **({"deletionTimestamp": "2026-11-27T04:00:11Z"} if deleting else {})},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "base", "state": {"terminated": terminated}}],
                   "conditions": []},
    }  # fmt: skip
    if disrupted_at:
        pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                                            "lastTransitionTime": disrupted_at})  # fmt: skip
    return pod


END = {"exit_code": 0, "signals": [], "spot_notice": None, "result": "kept"}


@pytest.mark.parametrize(
    ("pod", "stopped"),
    [
        (stopped_pod(END), False),  # finished, then deleted (PodGC of a completed pod)
        (stopped_pod({**END, "signals": ["SIGTERM"]}), True),  # exited 0 on the deletion's SIGTERM
        (stopped_pod({**END, "signals": ["SIGINT"]}), True),  # an image whose STOPSIGNAL is SIGINT
        (stopped_pod({**END, "signals": ["SIGHUP", "SIGUSR1"]}), False),  # the workload's own signals
        (stopped_pod({**END, "spot_notice": "2026-11-27T04:00:05Z", "result": "none"}), True),  # stopped on it
        (stopped_pod({**END, "spot_notice": "2026-11-27T04:00:05Z"}), False),  # ran past it, its result kept
        (stopped_pod({**END, "signals": ["SIGTERM"]}, deleting=False), False),  # not being deleted: the phase
        (stopped_pod(None), False),  # unprofiled: a deletion cannot be told from a finish, the phase stands
        (stopped_pod(None, disrupted_at="2026-11-27T04:00:10Z"), False),  # nor a drain in the same second
        (stopped_pod({**END, "signals": ["SIGTERM"]}, deleting=False, disrupted_at="2026-11-27T04:00:09Z"), True),
    ],
)
def test_a_succeeded_pod_is_a_success_unless_it_was_stopped(pod: dict[str, Any], stopped: bool) -> None:
    """``ended_on_a_deletion_signal``, and what ``classify_pod`` makes of it."""
    assert ended_on_a_deletion_signal(pod) is stopped
    assert (classify_pod(pod).outcome is Outcome.SUCCEEDED) is not stopped


def test_an_end_line_in_a_failed_container_s_message_is_not_the_profiler_s() -> None:
    """With ``FallbackToLogsOnError`` a failed container's message is its log's tail: a line printed there is
    not the profiler's (it writes on exit 0 only), so it tells nothing either way."""
    pod = stopped_pod({**END, "signals": ["SIGTERM"]})
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 1
    assert not ended_on_a_deletion_signal(pod)

"""Scheduling on the demo cluster: affinity, taints, capacity, and FailedScheduling.

The pods are built by the provider's own translation (``to_kubernetes``), so these tests also show
that what the core produces lands on the node a real scheduler would pick.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from airflow_gpu.accelerators.kubernetes import to_kubernetes
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for


def gpu_pod(name: str, accelerator: str, **placement: Any) -> dict[str, Any]:
    spec = to_kubernetes(accelerator, shared_memory=None, **placement)
    manifest = pod_manifest(
        name, ["sleep", "30"], container={"resources": spec.resources}, tolerations=spec.tolerations
    )
    if spec.affinity:
        manifest["spec"]["affinity"] = spec.affinity
    return manifest


def scheduled_condition(core: client.CoreV1Api, name: str) -> Any:
    def probe() -> Any:
        pod = core.read_namespaced_pod(name, "default")
        return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)

    return wait_for(probe)


def test_translations_place_pods_on_the_right_nodes(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", gpu_pod("h100", "H100:8", capacity="spot"))
    core.create_namespaced_pod("default", gpu_pod("l4", "L4:2", capacity="on-demand"))
    assert wait_for(phase_is(core, "h100", "Running")).spec.node_name in {"gpu-spot-1", "gpu-spot-2"}
    assert wait_for(phase_is(core, "l4", "Running")).spec.node_name == "gpu-on-demand-1"


def test_capacity_is_counted_and_freed(core: client.CoreV1Api) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod("default", gpu_pod(name, "H100:8"))
        wait_for(phase_is(core, name, "Running"))
    assert {core.read_namespaced_pod(n, "default").spec.node_name for n in ("a", "b")} == {"gpu-spot-1", "gpu-spot-2"}
    core.create_namespaced_pod("default", gpu_pod("c", "H100:8"))
    condition = scheduled_condition(core, "c")
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert condition.message == (
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    )
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=c").items
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "FailedScheduling", condition.message)]
    core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    assert wait_for(phase_is(core, "c", "Running")).spec.node_name == "gpu-spot-1"


def test_taints_keep_plain_pods_off_gpu_nodes(core: client.CoreV1Api) -> None:
    manifest = pod_manifest(
        "no-toleration", ["sleep", "5"], container={"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    )
    core.create_namespaced_pod("default", manifest)
    message = scheduled_condition(core, "no-toleration").message
    assert message == (
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "3 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_node_selector_and_affinity_operators(core: client.CoreV1Api) -> None:
    selector = pod_manifest("selected", ["true"], nodeSelector={"node.kubernetes.io/instance-type": "m6i.4xlarge"})
    core.create_namespaced_pod("default", selector)
    assert wait_for(phase_is(core, "selected", "Succeeded")).spec.node_name == "cpu-1"
    not_in = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]}
                ]
            }
        }
    }
    core.create_namespaced_pod("default", pod_manifest("cpu-only", ["true"], affinity=not_in))
    assert wait_for(phase_is(core, "cpu-only", "Succeeded")).spec.node_name == "cpu-1"
    nowhere = pod_manifest("nowhere", ["true"], nodeSelector={"pool": "missing"})
    core.create_namespaced_pod("default", nowhere)
    assert scheduled_condition(core, "nowhere").message == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "3 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_mig_and_other_vendors_stay_pending_with_a_reason(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", gpu_pod("mig", "H100-MIG-3g.40gb"))
    assert "Insufficient nvidia.com/mig-3g.40gb" in scheduled_condition(core, "mig").message
    core.create_namespaced_pod("default", gpu_pod("amd", "MI300X:8"))
    assert "didn't match Pod's node affinity/selector" in scheduled_condition(core, "amd").message

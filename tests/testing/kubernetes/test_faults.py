"""Fault injection: a preempted pod looks exactly like a spot reclaim, and its process got SIGTERM."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_gpu.spot.classifier import Outcome, classify_deleted_pod, classify_pod
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for

TRAP = (
    "import signal, sys, time\n"
    "def term(*_):\n"
    "    open(sys.argv[1], 'w').write('sigterm')\n"
    "    {on_term}\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def start_trapping_pod(
    core: client.CoreV1Api, name: str, marker: Path, on_term: str = "sys.exit(0)", **spec: object
) -> None:
    script = TRAP.format(on_term=on_term)
    core.create_namespaced_pod("default", pod_manifest(name, [sys.executable, "-c", script, str(marker)], **spec))
    wait_for(phase_is(core, name, "Running"))
    wait_for(lambda: b"ready" in core.read_namespaced_pod_log(name, "default", _preload_content=False).data)


def test_preempt_reproduces_graceful_node_shutdown(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "spot-job", marker)
    fault = kubernetes_emulator.preempt("spot-job")
    pod = core.read_namespaced_pod("spot-job", "default")
    assert marker.read_text() == "sigterm"
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Terminated")
    assert pod.status.message == "Pod was terminated in response to imminent node shutdown."
    disruption = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "TerminationByKubelet")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0  # the workload exited cleanly
    assert fault["fault"] == "preempt" and fault["pod"] == "spot-job" and fault["uid"] == pod.metadata.uid
    assert kubernetes_emulator.faults == [fault]


def test_sigkill_after_the_grace_period(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "stubborn", marker, on_term="pass", terminationGracePeriodSeconds=1)
    kubernetes_emulator.preempt("stubborn")
    pod = core.read_namespaced_pod("stubborn", "default")
    assert marker.read_text() == "sigterm"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137  # 128 + SIGKILL


def test_drain_evicts_through_the_eviction_api(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    start_trapping_pod(core, "evicted", tmp_path / "term")
    node = core.read_namespaced_pod("evicted", "default").spec.node_name
    assert kubernetes_emulator.drain(node) == ["evicted"]
    assert core.list_namespaced_pod("default").items == []
    assert core.read_node(node).spec.unschedulable is True
    assert [f["fault"] for f in kubernetes_emulator.faults] == ["cordon", "drain", "evict"]
    core.create_namespaced_pod("default", pod_manifest("after-drain", ["true"]))
    pending = wait_for(lambda: core.read_namespaced_pod("after-drain", "default").status.conditions)
    assert "node(s) were unschedulable" in pending[0].message


def test_remove_node_and_add_node(core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator) -> None:
    core.create_namespaced_pod("default", pod_manifest("doomed", ["sleep", "60"]))
    wait_for(phase_is(core, "doomed", "Running"))
    assert kubernetes_emulator.remove_node("cpu-1") == ["doomed"]
    assert [n.metadata.name for n in core.list_node().items] == ["gpu-on-demand-1", "gpu-spot-1", "gpu-spot-2"]
    assert core.list_namespaced_pod("default").items == []
    core.create_namespaced_pod("default", pod_manifest("waiting", ["true"]))
    wait_for(lambda: core.read_namespaced_pod("waiting", "default").status.conditions)
    kubernetes_emulator.add_node({"name": "cpu-2", "capacity": {"cpu": "4", "memory": "8Gi"}})
    assert wait_for(phase_is(core, "waiting", "Succeeded")).spec.node_name == "cpu-2"


def test_control_endpoint_from_another_process(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    start_trapping_pod(core, "remote", tmp_path / "term")

    def post(action: str, body: dict[str, object]) -> object:
        request = urllib.request.Request(
            f"{kubernetes_emulator.url}/_emulator/{action}",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    assert post("preempt", {"pod": "remote"})["fault"] == "preempt"  # type: ignore[index]
    assert core.read_namespaced_pod("remote", "default").status.reason == "Terminated"
    post("cordon", {"node": "gpu-spot-2"})
    with urllib.request.urlopen(f"{kubernetes_emulator.url}/_emulator/faults", timeout=10) as response:
        faults = json.loads(response.read())["faults"]
    assert [f["fault"] for f in faults] == ["preempt", "cordon"]


def test_no_process_is_left_behind(tmp_path: Path) -> None:
    with KubernetesEmulator() as emulator:
        api = client.CoreV1Api(
            __import__("kubernetes").config.new_client_from_config(str(emulator.write_kubeconfig(tmp_path / "kc")))
        )
        api.create_namespaced_pod("default", pod_manifest("sleeper", ["sleep", "300"]))
        pod = wait_for(phase_is(api, "sleeper", "Running"))
        pid = int(pod.status.container_statuses[0].container_id.split("://")[1])
        os.kill(pid, 0)  # running
    wait_for(lambda: not _alive(pid), timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _as_dict(pod: client.V1Pod) -> dict[str, Any]:
    """The pod as the API returned it, the classifier's input."""
    shape: dict[str, Any] = client.ApiClient().sanitize_for_serialization(pod)
    return shape


def _disruption(pod: client.V1Pod) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)


class _PhaseRecorder:
    """Every phase a watch on the pod reports, from a thread, until the pod is Failed or deleted."""

    def __init__(self, core: client.CoreV1Api, name: str) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []  # (event type, phase, reason)
        self.watching = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, name), daemon=True)
        self._thread.start()
        assert self.watching.wait(10)

    def _run(self, core: client.CoreV1Api, name: str) -> None:
        stream = watch.Watch()
        self.watching.set()
        for event in stream.stream(
            core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=30
        ):
            pod = event["object"]
            self.seen.append((event["type"], pod.status.phase, pod.status.reason))
            if event["type"] == "DELETED" or (pod.status.phase == "Failed" and pod.status.reason):
                stream.stop()

    def join(self) -> list[tuple[str, str | None, str | None]]:
        self._thread.join(timeout=30)
        return self.seen


def test_node_pressure_eviction_is_what_the_kubelet_writes(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "hungry", marker)  # exits 0 on SIGTERM
    phases = _PhaseRecorder(core, "hungry")
    fault = kubernetes_emulator.evict_for_node_pressure("hungry", usage="2Gi")
    pod = core.read_namespaced_pod("hungry", "default")  # the object stays, as after a node shutdown
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container base was using 2Gi, request is 0, has larger consumption of memory. "
    )
    assert marker.read_text() == "sigterm"
    assert (pod.status.phase, pod.status.reason, pod.status.message) == ("Failed", "Evicted", message)
    disruption = _disruption(pod)
    assert disruption is not None
    assert (disruption.status, disruption.reason, disruption.message) == ("True", "TerminationByKubelet", message)
    assert pod.metadata.deletion_timestamp is None
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=hungry").items
    assert any((e.type, e.reason, e.message) == ("Warning", "Evicted", message) for e in events)
    assert (fault["fault"], fault["pod"], fault["uid"], fault["resource"]) == (
        "evict_for_node_pressure", "hungry", pod.metadata.uid, "memory",
    )  # fmt: skip
    assert kubernetes_emulator.faults == [fault]
    seen = phases.join()  # the workload exited 0 on SIGTERM, yet no watcher ever saw the pod Succeeded
    assert seen[-1] == ("MODIFIED", "Failed", "Evicted")
    assert "Succeeded" not in [phase for _, phase, _ in seen]
    result = classify_pod(_as_dict(pod))
    assert (result.outcome, result.interrupted) == (Outcome.EVICTED, True)  # resubmitted, not a spot reclaim


def test_hard_node_pressure_eviction_ignores_the_pods_grace_period(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "stubborn", marker, on_term="pass", terminationGracePeriodSeconds=300)
    started = time.monotonic()
    kubernetes_emulator.evict_for_node_pressure("stubborn")
    assert time.monotonic() - started < 60  # 1 s (immediateEvictionGracePeriodSeconds), not 300 s
    pod = core.read_namespaced_pod("stubborn", "default")
    assert marker.read_text() == "sigterm"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137  # SIGKILL after the 1 s


def test_node_pressure_eviction_before_kubernetes_1_26(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    start_trapping_pod(core, "old-kubelet", tmp_path / "term")
    kubernetes_emulator.evict_for_node_pressure(
        "old-kubelet", "default", "ephemeral-storage", disruption_condition=False
    )
    pod = core.read_namespaced_pod("old-kubelet", "default")
    assert _disruption(pod) is None
    assert (
        pod.status.message
        == "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 4Gi. "
    )
    assert classify_pod(_as_dict(pod)).outcome is Outcome.EVICTED


def test_ephemeral_storage_eviction_is_the_workloads_fault(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "scribbler", marker)
    fault = kubernetes_emulator.evict_for_ephemeral_storage("scribbler", limit="2Gi", container="base")
    pod = core.read_namespaced_pod("scribbler", "default")
    message = 'Container base exceeded its local ephemeral storage limit "2Gi". '
    assert marker.read_text() == "sigterm"
    assert (pod.status.phase, pod.status.reason, pod.status.message) == ("Failed", "Evicted", message)
    assert _disruption(pod) is None  # "would reoccur on retry": the kubelet adds no DisruptionTarget
    assert (fault["fault"], fault["container"], fault["limit"]) == ("evict_for_ephemeral_storage", "base", "2Gi")
    result = classify_pod(_as_dict(pod))
    assert (result.outcome, result.interrupted) == (Outcome.APPLICATION, False)


def test_ephemeral_storage_messages_for_the_pod_and_an_emptydir(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    start_trapping_pod(core, "whole-pod", tmp_path / "a")
    start_trapping_pod(core, "scratch", tmp_path / "b")
    kubernetes_emulator.evict_for_ephemeral_storage("whole-pod")
    kubernetes_emulator.evict_for_ephemeral_storage("scratch", limit="500Mi", volume="cache")
    assert core.read_namespaced_pod("whole-pod", "default").status.message == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. "
    )
    assert core.read_namespaced_pod("scratch", "default").status.message == (
        'Usage of EmptyDir volume "cache" exceeds the limit "500Mi". '
    )


def test_delete_by_person_is_a_plain_graceful_delete(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    marker = tmp_path / "term"
    start_trapping_pod(core, "deleted", marker, on_term="pass", terminationGracePeriodSeconds=2)
    last_seen = core.read_namespaced_pod("deleted", "default")
    node = last_seen.spec.node_name
    faults: list[dict[str, Any]] = []
    deleting = threading.Thread(target=lambda: faults.append(kubernetes_emulator.delete_by_person("deleted")))
    deleting.start()
    terminating = wait_for(lambda: _read_or_none(core, "deleted", require_deletion=True))
    assert terminating.metadata.deletion_grace_period_seconds == 2
    assert _disruption(terminating) is None  # a person's DELETE carries no DisruptionTarget
    deleting.join(timeout=30)
    assert not deleting.is_alive()
    assert _read_or_none(core, "deleted") is None  # gone once the grace period is over
    assert marker.read_text() == "sigterm"
    assert [f["fault"] for f in kubernetes_emulator.faults] == ["delete_by_person"] and faults[0]["node"] == node
    node_exists = any(n.metadata.name == node for n in core.list_node().items)
    result = classify_deleted_pod(_as_dict(terminating), node_exists)
    assert (result.outcome, result.interrupted) == (Outcome.DELETED, False)
    assert classify_deleted_pod(_as_dict(last_seen), node_exists).outcome is Outcome.DELETED


def _read_or_none(core: client.CoreV1Api, name: str, require_deletion: bool = False) -> client.V1Pod | None:
    try:
        pod = core.read_namespaced_pod(name, "default")
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return pod if pod.metadata.deletion_timestamp or not require_deletion else None

"""Fault injection: a preempted pod looks exactly like a spot reclaim, and its process got SIGTERM."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from kubernetes import client

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

"""Simulated containers (image ``simulated.local/...``): pods without processes, same API and faults."""

from __future__ import annotations

from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for


def simulated(name: str, **env: str) -> dict:
    manifest = pod_manifest(name, [])
    container = manifest["spec"]["containers"][0]
    container["image"] = "simulated.local/trainer"
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return manifest


def test_a_simulated_container_prints_runs_and_exits_as_scripted(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", simulated("scripted", SIMULATED_SECONDS="0.3", SIMULATED_EXIT_CODE="3", SIMULATED_OUTPUT="a\nb")
    )
    pod = wait_for(phase_is(core, "scripted", "Failed"))
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert core.read_namespaced_pod_log("scripted", "default", _preload_content=False).data == b"a\nb\n"
    core.create_namespaced_pod("default", simulated("quick", SIMULATED_SECONDS="0"))
    assert wait_for(phase_is(core, "quick", "Succeeded")).status.container_statuses[0].state.terminated.exit_code == 0


def test_faults_reach_a_simulated_pod_as_a_real_one(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    core.create_namespaced_pod("default", simulated("long"))
    wait_for(phase_is(core, "long", "Running"))
    kubernetes_emulator.preempt("long", grace_period_seconds=0)
    pod = wait_for(phase_is(core, "long", "Failed"))
    assert {c.type: c.reason for c in pod.status.conditions}["DisruptionTarget"] == "TerminationByKubelet"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 143
    core.create_namespaced_pod("default", simulated("deleted"))
    wait_for(phase_is(core, "deleted", "Running"))
    core.delete_namespaced_pod("deleted", "default", grace_period_seconds=0)
    wait_for(lambda: not [p for p in core.list_namespaced_pod("default").items if p.metadata.name == "deleted"])

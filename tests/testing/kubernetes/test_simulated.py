"""Simulated containers (image ``simulated.local/...``): pods without processes, same API and faults."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.objects import ApiError
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


def test_finish_ends_a_simulated_workload_now_and_the_phase_clock_times_it(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    core.create_namespaced_pod("default", simulated("done"))
    core.create_namespaced_pod("default", simulated("broken"))
    for name in ("done", "broken"):
        wait_for(phase_is(core, name, "Running"))
    before = time.time()
    assert kubernetes_emulator.finish("done") == {"done": ["base"]}
    assert kubernetes_emulator.finish("broken", exit_code=2) == {"broken": ["base"]}
    done = wait_for(phase_is(core, "done", "Succeeded"))
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert wait_for(phase_is(core, "broken", "Failed")).status.container_statuses[0].state.terminated.exit_code == 2
    times = {entry["name"]: entry for entry in kubernetes_emulator.pod_phase_times("default")}
    phases = times["done"]["phases"]
    assert list(phases) == ["Pending", "Running", "Succeeded"]
    assert phases["Running"] < before <= phases["Succeeded"] <= time.time()
    assert (times["done"]["uid"], times["done"]["deleted"]) == (done.metadata.uid, None)
    core.delete_namespaced_pod("done", "default", grace_period_seconds=0)
    deleted = {e["name"]: e["deleted"] for e in kubernetes_emulator.pod_phase_times()}["done"]
    assert deleted is not None and deleted >= phases["Succeeded"]


def test_the_phase_clock_says_when_a_watch_first_sent_each_phase(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """``sent``: when a watch wrote the first event showing the phase, after the phase was recorded and
    before the client read that event; a pod no watch selects has none."""
    labels = {"watched": "yes"}
    core.create_namespaced_pod("default", {**simulated("watched"), "metadata": {"name": "watched", "labels": labels}})
    core.create_namespaced_pod("default", simulated("unwatched"))
    for name in ("watched", "unwatched"):
        wait_for(phase_is(core, name, "Running"))
    version = core.list_namespaced_pod("default").metadata.resource_version
    query = f"watch=true&labelSelector=watched%3Dyes&resourceVersion={version}&timeoutSeconds=20"
    with urllib.request.urlopen(f"{kubernetes_emulator.url}/api/v1/namespaces/default/pods?{query}") as stream:
        kubernetes_emulator.finish("watched")
        kubernetes_emulator.finish("unwatched")
        for line in stream:
            event = json.loads(line)
            if event["object"]["status"]["phase"] == "Succeeded":
                read = time.time()
                break
    wait_for(phase_is(core, "unwatched", "Succeeded"))  # its end is its own, not the watched pod's
    times = {entry["name"]: entry for entry in kubernetes_emulator.pod_phase_times("default")}
    watched = times["watched"]
    assert "Pending" not in watched["sent"]  # the watch began once the pod ran
    assert watched["phases"]["Succeeded"] <= watched["sent"]["Succeeded"] <= read
    assert "Succeeded" in times["unwatched"]["phases"] and times["unwatched"]["sent"] == {}


def test_finish_refuses_a_pod_with_no_simulated_container(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    core.create_namespaced_pod("default", pod_manifest("real", ["sleep", "30"]))
    wait_for(phase_is(core, "real", "Running"))
    with pytest.raises(ApiError, match="has no simulated container"):
        kubernetes_emulator.finish("real")
    url = f"{kubernetes_emulator.url}/_emulator/finish"
    request = urllib.request.Request(url, json.dumps({"pods": ["real"]}).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400


def test_a_simulated_pod_checks_its_volumes_and_makes_nothing_on_this_host(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    manifest = simulated("mounts")
    manifest["spec"]["volumes"] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "settings", "configMap": {"name": "trainer-settings"}},
    ]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "shm", "mountPath": "/dev/shm"}, {"name": "settings", "mountPath": "/etc/trainer"},
    ]  # fmt: skip
    core.create_namespaced_pod("default", manifest)

    def failed_mount() -> Any:
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=mounts").items
        return next((e for e in events if e.reason == "FailedMount"), None)

    event = wait_for(failed_mount)
    assert event.message == 'MountVolume.SetUp failed for volume "settings" : configmap "trainer-settings" not found'
    assert core.read_namespaced_pod("mounts", "default").status.phase == "Pending"
    core.create_namespaced_config_map("default", {"metadata": {"name": "trainer-settings"}, "data": {"a": "1"}})
    wait_for(phase_is(core, "mounts", "Running"), timeout=30)
    assert kubernetes_emulator.state is not None
    run = kubernetes_emulator.state.runs[("default", "mounts")]
    assert run.volumes is None and "workdir" not in run.__dict__  # no tmpfs, no directory

"""The unmodified ``kubernetes`` client against the emulator's real HTTP API (no mocks)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client, watch

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for


def test_nodes_of_the_demo_cluster(core: client.CoreV1Api) -> None:
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == {"gpu-spot-1", "gpu-spot-2", "gpu-on-demand-1", "cpu-1"}
    spot = nodes["gpu-spot-1"]
    assert spot.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert spot.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert spot.metadata.labels["karpenter.sh/capacity-type"] == "spot"
    assert spot.status.allocatable["nvidia.com/gpu"] == "8"
    assert [(t.key, t.effect) for t in spot.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert nodes["gpu-on-demand-1"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert nodes["cpu-1"].spec.taints is None
    assert core.read_node("cpu-1").metadata.uid == nodes["cpu-1"].metadata.uid


def test_pod_lifecycle_create_get_list_logs_events(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod(
        "default",
        pod_manifest("hello", ["sh", "-c", "echo one; echo two >&2; exit 3"], labels={"app": "a", "tier": "x"}),
    )
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert created.status.phase == "Pending"
    pod = wait_for(phase_is(core, "hello", "Failed"))
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert terminated.started_at and terminated.finished_at
    assert pod.spec.node_name == "cpu-1"  # untainted: the only node a plain pod fits
    assert core.read_namespaced_pod_log("hello", "default", _preload_content=False).data == b"one\ntwo\n"
    stamped = core.read_namespaced_pod_log("hello", "default", timestamps=True, _preload_content=False).data.decode()
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped.splitlines())
    assert core.read_namespaced_pod_log("hello", "default", tail_lines=1, _preload_content=False).data == b"two\n"
    reasons = [
        e.reason for e in core.list_namespaced_event("default", field_selector="involvedObject.name=hello").items
    ]
    assert {"Scheduled", "Pulled", "Created", "Started"} <= set(reasons)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"a1", "a2"}),
        ("app==a,tier=gpu", {"a2"}),
        ("app!=a", {"b1"}),
        ("app in (a, b)", {"a1", "a2", "b1"}),
        ("app notin (a)", {"b1"}),
        ("tier", {"a2"}),
        ("!tier", {"a1", "b1"}),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    for name, labels in {"a1": {"app": "a"}, "a2": {"app": "a", "tier": "gpu"}, "b1": {"app": "b"}}.items():
        core.create_namespaced_pod("default", pod_manifest(name, ["true"], labels=labels))
    assert {p.metadata.name for p in core.list_namespaced_pod("default", label_selector=selector).items} == expected


def test_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_manifest("f1", ["true"]))
    core.create_namespaced_pod("default", pod_manifest("f2", ["sleep", "30"]))
    wait_for(phase_is(core, "f1", "Succeeded"))
    wait_for(phase_is(core, "f2", "Running"))
    names = lambda selector: {p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=selector).items}  # noqa: E731
    assert names("metadata.name=f1") == {"f1"}
    assert names("status.phase=Running") == {"f2"}
    assert names("spec.nodeName=cpu-1,status.phase!=Running") == {"f1"}


def test_watch_streams_changes(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod("default").metadata.resource_version
    seen: list[tuple[str, str | None]] = []

    def consume() -> None:
        stream = watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=10)
        for event in stream:
            seen.append((event["type"], event["object"].status.phase))
            if event["type"] == "DELETED":
                return

    reader = threading.Thread(target=consume)
    reader.start()
    core.create_namespaced_pod("default", pod_manifest("watched", ["true"]))
    wait_for(phase_is(core, "watched", "Succeeded"))
    core.delete_namespaced_pod("watched", "default")
    reader.join(timeout=15)
    assert seen[0] == ("ADDED", "Pending")
    assert ("MODIFIED", "Running") in seen or ("MODIFIED", "Succeeded") in seen
    assert seen[-1][0] == "DELETED"


def test_patch_formats_and_status_subresource(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_manifest("patched", ["sleep", "30"]))
    merged = core.patch_namespaced_pod("patched", "default", {"metadata": {"labels": {"checked": "yes"}}})
    assert merged.metadata.labels == {"app": "test", "checked": "yes"}
    removed = core.patch_namespaced_pod("patched", "default", [{"op": "remove", "path": "/metadata/labels/checked"}])
    assert removed.metadata.labels == {"app": "test"}
    status = core.patch_namespaced_pod_status(
        "patched", "default", {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}
    )
    types = [c.type for c in status.status.conditions]  # strategic merge: conditions merge by ``type``
    assert types[-1] == "Custom" and "PodScheduled" in types
    before = core.read_namespaced_pod("patched", "default").metadata.resource_version
    core.patch_namespaced_pod("patched", "default", {"metadata": {"annotations": {"a": "b"}}})
    assert int(core.read_namespaced_pod("patched", "default").metadata.resource_version) > int(before)


def test_status_errors(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["reason"] == "NotFound"
    core.create_namespaced_pod("default", pod_manifest("twice", ["true"]))
    with pytest.raises(client.ApiException) as duplicate:
        core.create_namespaced_pod("default", pod_manifest("twice", ["true"]))
    assert duplicate.value.status == 409 and json.loads(duplicate.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as bad:
        core.create_namespaced_pod("default", {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}})
    body = json.loads(bad.value.body)
    assert bad.value.status == 422 and body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers"}
    with pytest.raises(client.ApiException) as unequal:
        core.create_namespaced_pod(
            "default",
            pod_manifest(
                "gpus",
                ["true"],
                container={"resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}},
            ),
        )
    assert unequal.value.status == 422 and "must be equal to nvidia.com/gpu limit" in unequal.value.body
    with pytest.raises(client.ApiException) as no_namespace:
        core.create_namespaced_pod("ghost", pod_manifest("x", ["true"]))
    assert no_namespace.value.status == 404
    with pytest.raises(client.ApiException) as selector:
        core.list_namespaced_pod("default", label_selector="a in (")
    assert selector.value.status == 400


def test_delete_sends_sigterm_then_removes_the_pod(core: client.CoreV1Api, tmp_path: Path) -> None:
    marker = str(tmp_path / "got-sigterm")
    script = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({marker!r}, 'w').write('term'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    core.create_namespaced_pod("default", pod_manifest("graceful", [sys.executable, "-c", script]))
    wait_for(phase_is(core, "graceful", "Running"))
    wait_for(lambda: b"ready" in core.read_namespaced_pod_log("graceful", "default", _preload_content=False).data)
    deleting = core.delete_namespaced_pod("graceful", "default", grace_period_seconds=10)
    assert deleting.metadata.deletion_timestamp is not None
    wait_for(lambda: not core.list_namespaced_pod("default", field_selector="metadata.name=graceful").items)
    assert Path(marker).read_text() == "term"


def test_missing_command_is_container_cannot_run(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_manifest("broken", ["definitely-not-a-command-xyz"]))
    pod = wait_for(phase_is(core, "broken", "Failed"))
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.reason == "ContainerCannotRun"
    assert "definitely-not-a-command-xyz" in terminated.message


def test_log_follow_streams_until_the_container_ends(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", pod_manifest("chatty", ["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.2; done"])
    )
    wait_for(phase_is(core, "chatty", "Running", "Succeeded"))
    response = core.read_namespaced_pod_log("chatty", "default", follow=True, _preload_content=False)
    lines = [line.decode().strip() for line in response.stream() if line.strip()]
    assert " ".join(lines).split() == ["line", "1", "line", "2", "line", "3"]


def test_downward_api_and_env(core: client.CoreV1Api) -> None:
    env = [
        {"name": "GREETING", "value": "hi"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    ]
    core.create_namespaced_pod(
        "default", pod_manifest("env", ["sh", "-c", "echo $GREETING $POD_NAME $NODE $APP"], container={"env": env})
    )
    wait_for(phase_is(core, "env", "Succeeded"))
    assert core.read_namespaced_pod_log("env", "default", _preload_content=False).data == b"hi env cpu-1 test\n"


def test_services_jobs_and_namespaces(core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    service = core.create_namespaced_service(
        "team-a", {"metadata": {"name": "rdzv"}, "spec": {"clusterIP": "None", "selector": {"job": "train"}}}
    )
    assert service.metadata.namespace == "team-a"
    batch = client.BatchV1Api(core.api_client)
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}},
        },
    }
    created = batch.create_namespaced_job("team-a", job)
    assert created.metadata.uid
    assert [j.metadata.name for j in batch.list_namespaced_job("team-a").items] == ["train"]
    batch.delete_namespaced_job("train", "team-a", propagation_policy="Background")  # removed at once
    with pytest.raises(client.ApiException) as gone:
        batch.read_namespaced_job("train", "team-a")
    assert gone.value.status == 404

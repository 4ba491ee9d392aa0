"""Volumes: each container sees its pod's volumes at their mount paths, in its own mount namespace.

Shapes from the Kubernetes docs (Volumes, ConfigMaps, Secrets, "Expose Pod Information to
Containers Through Files") and the kubelet's FailedMount message
(``MountVolume.SetUp failed for volume "v" : configmap "c" not found``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_gpu.testing.kubernetes import volumes
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for

pytestmark = pytest.mark.skipif(not volumes.namespaces_available(), reason="needs mount namespaces (root)")


def _log(core: client.CoreV1Api, name: str) -> str:
    wait_for(phase_is(core, name, "Succeeded", "Failed"))
    return str(core.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode())


def _run(
    core: client.CoreV1Api, name: str, script: str, mounts: list[dict[str, Any]], vols: list[dict[str, Any]]
) -> str:
    core.create_namespaced_pod(
        "default", pod_manifest(name, ["sh", "-c", script], container={"volumeMounts": mounts}, volumes=vols)
    )
    return _log(core, name)


def test_an_empty_dir_carries_a_file_from_one_container_to_another(core: client.CoreV1Api) -> None:
    mount = [{"name": "shared", "mountPath": "/emulated/shared"}]
    manifest = {
        "metadata": {"name": "pair"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "containers": [
                {
                    "name": "writer",
                    "image": "x",
                    "command": ["sh", "-c", "echo hello > /emulated/shared/f"],
                    "volumeMounts": mount,
                },
                {
                    "name": "reader",
                    "image": "x",
                    "command": [
                        "sh",
                        "-c",
                        "while [ ! -s /emulated/shared/f ]; do sleep 0.05; done; cat /emulated/shared/f",
                    ],
                    "volumeMounts": mount,
                },
            ],
        },
    }
    core.create_namespaced_pod("default", manifest)
    wait_for(phase_is(core, "pair", "Succeeded", "Failed"))
    log = core.read_namespaced_pod_log("pair", "default", container="reader", _preload_content=False)
    assert log.data == b"hello\n"


def test_a_mount_is_the_containers_own(core: client.CoreV1Api, tmp_path: Any) -> None:
    out = _run(
        core,
        "private",
        "touch /emulated/own/x; ls /emulated/own",
        [{"name": "v", "mountPath": "/emulated/own"}],
        [{"name": "v", "emptyDir": {}}],
    )
    assert out == "x\n"
    assert not Path("/emulated/own/x").exists()  # the host's directory is only a mount point


def test_a_memory_empty_dir_is_a_tmpfs_of_its_size_limit(core: client.CoreV1Api) -> None:
    out = _run(
        core,
        "shm",
        "grep ' /dev/shm ' /proc/mounts | tail -1 | cut -d' ' -f3; "
        "df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2",
        [{"name": "shm", "mountPath": "/dev/shm"}],
        [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    )
    assert out.split() == ["tmpfs", str(64 * 1024)]


def test_config_map_and_secret_files_with_items_and_modes(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "settings"}, "data": {"a.conf": "alpha", "b.conf": "beta"}}
    )
    core.create_namespaced_secret(
        "default",
        {
            "metadata": {"name": "creds"},
            "data": {"token": base64.b64encode(b"s3cret").decode()},
            "stringData": {"user": "me"},
        },
    )
    stored = core.read_namespaced_secret("creds", "default")
    assert stored.data == {"token": base64.b64encode(b"s3cret").decode(), "user": base64.b64encode(b"me").decode()}
    assert stored.string_data is None and stored.type == "Opaque"
    out = _run(
        core,
        "config",
        "ls /etc/cfg; cat /etc/cfg/renamed; echo; stat -c %a /etc/cfg/renamed; "
        "cat /etc/creds/token /etc/creds/user; echo; stat -c %a /etc/creds/token",
        [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True}, {"name": "sec", "mountPath": "/etc/creds"}],
        [
            {
                "name": "cfg",
                "configMap": {"name": "settings", "items": [{"key": "b.conf", "path": "renamed", "mode": 0o600}]},
            },
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        ],
    )
    assert out.split("\n")[:4] == ["renamed", "beta", "600", "s3cretme"]
    assert out.split("\n")[4] == "400"


def test_a_read_only_mount_refuses_writes(core: client.CoreV1Api) -> None:
    out = _run(
        core,
        "readonly",
        "(echo x > /emulated/ro/f) 2>/dev/null && echo wrote || echo refused",
        [{"name": "v", "mountPath": "/emulated/ro", "readOnly": True}],
        [{"name": "v", "emptyDir": {}}],
    )
    assert out == "refused\n"


def test_sub_path_mounts_one_key_as_a_file(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "one"}, "data": {"app.yaml": "k: v"}})
    out = _run(
        core,
        "subpath",
        "cat /emulated/etc/app.yaml",
        [{"name": "cfg", "mountPath": "/emulated/etc/app.yaml", "subPath": "app.yaml"}],
        [{"name": "cfg", "configMap": {"name": "one"}}],
    )
    assert out == "k: v\n"


def test_downward_api_and_projected_files(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "proj"}, "data": {"x": "1"}})
    out = _run(
        core,
        "downward",
        "cat /emulated/info/name; echo; cat /emulated/info/labels; echo; cat /emulated/all/x /emulated/all/podname",
        [{"name": "info", "mountPath": "/emulated/info"}, {"name": "all", "mountPath": "/emulated/all"}],
        [
            {
                "name": "info",
                "downwardAPI": {
                    "items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    ]
                },
            },
            {
                "name": "all",
                "projected": {
                    "sources": [
                        {"configMap": {"name": "proj"}},
                        {"downwardAPI": {"items": [{"path": "podname", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    ]
                },
            },
        ],
    )
    assert out == 'downward\napp="test"\n1downward\n'


def test_a_missing_config_map_keeps_the_pod_creating_with_failed_mount(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default",
        pod_manifest(
            "nomap",
            ["true"],
            container={"volumeMounts": [{"name": "cfg", "mountPath": "/emulated/cfg"}]},
            volumes=[{"name": "cfg", "configMap": {"name": "absent"}}],
        ),
    )

    def failed_mount() -> Any:
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=nomap").items
        return [e for e in events if e.reason == "FailedMount"]

    (event,) = wait_for(failed_mount)
    assert event.type == "Warning"
    assert event.message == 'MountVolume.SetUp failed for volume "cfg" : configmap "absent" not found'
    pod = core.read_namespaced_pod("nomap", "default")
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    core.create_namespaced_config_map("default", {"metadata": {"name": "absent"}, "data": {"k": "v"}})
    wait_for(phase_is(core, "nomap", "Succeeded"))  # the kubelet retries, as it does


def test_an_optional_missing_secret_mounts_empty(core: client.CoreV1Api) -> None:
    out = _run(
        core,
        "optional",
        "ls -A /emulated/opt | wc -l",
        [{"name": "s", "mountPath": "/emulated/opt"}],
        [{"name": "s", "secret": {"secretName": "nowhere", "optional": True}}],
    )
    assert out.strip() == "0"


def test_a_host_path_of_the_wrong_type_fails_the_mount(core: client.CoreV1Api, tmp_path: Any) -> None:
    (tmp_path / "file").write_text("x")
    core.create_namespaced_pod(
        "default",
        pod_manifest(
            "hostpath",
            ["true"],
            container={"volumeMounts": [{"name": "h", "mountPath": "/emulated/h"}]},
            volumes=[{"name": "h", "hostPath": {"path": str(tmp_path / "file"), "type": "Directory"}}],
        ),
    )

    def failed_mount() -> Any:
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=hostpath").items
        return [e.message for e in events if e.reason == "FailedMount"]

    assert wait_for(failed_mount) == [
        f'MountVolume.SetUp failed for volume "h" : hostPath type check failed: {tmp_path / "file"} is not a directory'
    ]


def test_a_host_path_directory_or_create_is_shared_with_the_host(core: client.CoreV1Api, tmp_path: Any) -> None:
    target = tmp_path / "made"
    _run(
        core,
        "hostdir",
        "echo from-pod > /emulated/host/out",
        [{"name": "h", "mountPath": "/emulated/host"}],
        [{"name": "h", "hostPath": {"path": str(target), "type": "DirectoryOrCreate"}}],
    )
    assert (target / "out").read_text() == "from-pod\n"


def test_config_map_keys_are_validated(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_config_map("default", {"metadata": {"name": "bad"}, "data": {"no/slash": "x"}})
    assert raised.value.status == 422
    assert "data[no/slash]" in raised.value.body and "a valid config key" in raised.value.body


def test_a_volume_type_the_emulator_lacks_fails_its_mount(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default",
        pod_manifest(
            "claim",
            ["true"],
            container={"volumeMounts": [{"name": "data", "mountPath": "/emulated/data"}]},
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )

    def failed_mount() -> Any:
        events = core.list_namespaced_event("default", field_selector="involvedObject.name=claim").items
        return [e.message for e in events if e.reason == "FailedMount"]

    (message,) = wait_for(failed_mount)
    assert message.startswith('MountVolume.SetUp failed for volume "data" : persistentVolumeClaim volumes are not')
    assert core.read_namespaced_pod("claim", "default").status.phase == "Pending"


def test_a_pre_stop_hook_runs_in_the_container_with_its_mounts_and_env(core: client.CoreV1Api, tmp_path: Any) -> None:
    hook = {"exec": {"command": ["sh", "-c", "echo $ROLE > /emulated/hook/out"]}}
    core.create_namespaced_pod(
        "default",
        pod_manifest(
            "hooked",
            ["sh", "-c", "trap 'exit 0' TERM; sleep 60 & wait"],
            container={
                "env": [{"name": "ROLE", "value": "trainer"}],
                "lifecycle": {"preStop": hook},
                "volumeMounts": [{"name": "h", "mountPath": "/emulated/hook"}],
            },
            volumes=[{"name": "h", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
        ),
    )
    wait_for(phase_is(core, "hooked", "Running"))
    core.delete_namespaced_pod("hooked", "default", grace_period_seconds=5)
    assert wait_for(lambda: (tmp_path / "out").exists() and (tmp_path / "out").read_text()) == "trainer\n"


def test_config_maps_and_secrets_are_listed_patched_and_deleted(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "crud", "labels": {"a": "b"}}, "data": {"k": "1"}}
    )
    core.patch_namespaced_config_map("crud", "default", {"data": {"k": "2"}})
    (listed,) = core.list_namespaced_config_map("default", label_selector="a=b").items
    assert (listed.data == {"k": "2"} and listed.kind is None) or listed.data == {"k": "2"}
    core.delete_namespaced_config_map("crud", "default")
    with pytest.raises(ApiException) as raised:
        core.read_namespaced_config_map("crud", "default")
    assert raised.value.status == 404
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_secret("default", {"metadata": {"name": "bad"}, "data": {"k": "not base64!"}})
    assert raised.value.status == 400


@pytest.mark.parametrize(
    ("mount", "field", "said"),
    [
        ({"name": "nope", "mountPath": "/data"}, "spec.containers[0].volumeMounts[0].name", 'Not found: "nope"'),
        ({"name": "scratch", "mountPath": "/data", "subPath": "/etc"}, "spec.containers[0].volumeMounts[0].subPath",
         "must be a relative path"),
        ({"name": "scratch", "mountPath": "/data", "subPath": "a/../../etc"},
         "spec.containers[0].volumeMounts[0].subPath", "must not contain '..'"),
    ],
)  # fmt: skip
def test_a_mount_of_no_volume_or_outside_its_volume_is_refused(
    core: client.CoreV1Api, mount: dict[str, Any], field: str, said: str
) -> None:
    """``ValidateVolumeMounts``: the API server refuses these with 422 before anything runs."""
    manifest = pod_manifest(
        "bad-mount", ["true"], volumes=[{"name": "scratch", "emptyDir": {}}], container={"volumeMounts": [mount]}
    )
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", manifest)
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert any(c["field"] == field and said in c["message"] for c in causes), causes


def _terminated(core: client.CoreV1Api, name: str) -> Any:
    wait_for(phase_is(core, name, "Succeeded", "Failed"))
    return core.read_namespaced_pod(name, "default").status.container_statuses[0].state.terminated


def test_the_termination_message_file_becomes_the_terminated_state_s_message(core: client.CoreV1Api) -> None:
    """The API server defaults ``terminationMessagePath`` to ``/dev/termination-log`` (policy ``File``); the
    kubelet mounts an empty file there, writable by any user, and copies its last 4096 bytes
    (``tail.ReadAtMost`` in ``getTerminationMessage``) into ``state.terminated.message``; a pod's messages
    share 12 KiB, each container keeping the start of its part (``normalizeStatus``)."""
    path = "/dev/termination-log"
    script = f"test -f {path} && test ! -s {path} && printf 'done: 42' > {path}"
    core.create_namespaced_pod("default", pod_manifest("said", ["sh", "-c", script]))
    spec = core.read_namespaced_pod("said", "default").spec.containers[0]
    assert (spec.termination_message_path, spec.termination_message_policy) == ("/dev/termination-log", "File")
    assert _terminated(core, "said").message == "done: 42"
    long = "python3 -c \"import sys; sys.stdout.write('a' * 1000 + 'b' * 4096)\" > /dev/termination-log"
    core.create_namespaced_pod("default", pod_manifest("long", ["sh", "-c", long]))
    assert _terminated(core, "long").message == "b" * 4096
    four = {"metadata": {"name": "four"}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": f"c{i}", "image": "x", "command": ["sh", "-c", long.replace("'b' * 4096", "'b' * 3000 + 'c' * 1096")]}
        for i in range(4)]}}  # fmt: skip
    core.create_namespaced_pod("default", four)
    wait_for(phase_is(core, "four", "Succeeded", "Failed"))
    statuses = core.read_namespaced_pod("four", "default").status.container_statuses
    assert [s.state.terminated.message for s in statuses] == ["b" * 3000 + "c" * 72] * 4  # 12288 / 4 = 3072


def test_a_path_of_the_container_s_own_and_the_log_fallback(core: client.CoreV1Api) -> None:
    """A ``terminationMessagePath`` of its own; with ``FallbackToLogsOnError`` an empty file gives a failed
    container's log tail, and a succeeded one's nothing (no ``message``)."""
    own = {"terminationMessagePath": "/emulated/end-message"}
    core.create_namespaced_pod("default", pod_manifest("own", ["sh", "-c", "echo bye > /emulated/end-message"],
                                                       container=own))  # fmt: skip
    assert _terminated(core, "own").message == "bye\n"
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    core.create_namespaced_pod("default", pod_manifest("failed", ["sh", "-c", "echo one; echo two; exit 3"],
                                                       container=fallback))  # fmt: skip
    assert _terminated(core, "failed").message == "one\ntwo\n"
    core.create_namespaced_pod("default", pod_manifest("fine", ["sh", "-c", "echo one"], container=fallback))
    assert _terminated(core, "fine").message is None

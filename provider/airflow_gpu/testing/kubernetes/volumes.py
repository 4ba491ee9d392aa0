"""The kubelet's volume manager: a pod's volumes as directories on this host, mounted per container.

Each volume of a pod becomes a directory under the pod's work directory, made once before its
containers start (``prepare``), as the kubelet's volume manager does: an ``emptyDir`` is an empty
directory (``medium: Memory``: a tmpfs mounted there on this host, ``sizeLimit`` its size), a
``configMap``, ``secret``, ``downwardAPI`` or ``projected`` volume a directory of files (``items``
select and rename keys, ``defaultMode``/``mode`` set their permission bits), a ``hostPath`` the
host path itself after the kubelet's ``type`` check. ``container_mounts`` then lists, per
container, what ``container_init.py`` bind-mounts in the container's own mount namespace
(``subPath`` selects a path inside the volume, ``readOnly`` remounts read-only).

A volume that cannot be made raises ``MountError`` with the kubelet's message
(``MountVolume.SetUp failed for volume "v" : configmap "c" not found``, from
``operation_generator.go`` ``GenerateError`` and the configMap/secret/hostPath plugins); the
kubelet keeps the containers Waiting in ContainerCreating, reports FailedMount and retries.
"""

from __future__ import annotations

import base64
import shutil
import stat
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from airflow_gpu.testing.kubernetes.downward import field_ref

Obj = dict[str, Any]
#: ``(plural, namespace, name) -> object or None``: reads configMaps and secrets from the store.
Lookup = Callable[[str, str, str], Obj | None]

DEFAULT_MODE = 0o644  # configMap/secret/downwardAPI/projected defaultMode, as the API server defaults it
SERVICE_ACCOUNT_TOKEN = "emulated-service-account-token"
EMULATED = ("emptyDir", "hostPath", "configMap", "secret", "downwardAPI", "projected")


class MountError(Exception):
    """A volume could not be set up; ``str()`` is the kubelet's FailedMount event message."""

    def __init__(self, volume: str, detail: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {detail}')


@cache
def namespaces_available() -> bool:
    """Whether this machine lets the kubelet give a process its own mount and PID namespaces."""
    if not shutil.which("unshare"):
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--pid", "--fork", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _quantity_bytes(value: Any) -> int:
    """``sizeLimit`` as bytes (``64Mi``, ``1G``, ``1000``)."""
    text = str(value)
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


def _write_files(directory: Path, files: dict[str, tuple[bytes, int]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, mode) in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)


def _key_files(
    kind: str, source: Obj, data: dict[str, bytes] | None, volume: str, default_mode: int
) -> dict[str, tuple[bytes, int]]:
    """The files of a configMap or secret source: every key, or ``items`` (``keyToPath``)."""
    name = source.get("name", "")
    if data is None:
        if source.get("optional"):
            return {}
        raise MountError(volume, f'{kind} "{name}" not found')
    items = source.get("items")
    if not items:
        return {key: (value, default_mode) for key, value in data.items()}
    files = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            missing = (
                "configmap references non-existent config key"
                if kind == "configmap"
                else "references non-existent secret key"
            )
            raise MountError(volume, f"{missing}: {item['key']}")
        files[item["path"]] = (data[item["key"]], int(item.get("mode", default_mode)))
    return files


def _config_map_data(lookup: Lookup, namespace: str, name: str) -> dict[str, bytes] | None:
    obj = lookup("configmaps", namespace, name)
    if obj is None:
        return None
    data = {key: str(value).encode() for key, value in (obj.get("data") or {}).items()}
    data |= {key: base64.b64decode(value) for key, value in (obj.get("binaryData") or {}).items()}
    return data


def _secret_data(lookup: Lookup, namespace: str, name: str) -> dict[str, bytes] | None:
    obj = lookup("secrets", namespace, name)
    if obj is None:
        return None
    return {key: base64.b64decode(value or "") for key, value in (obj.get("data") or {}).items()}


def _downward_files(pod: Obj, items: list[Obj], default_mode: int) -> dict[str, tuple[bytes, int]]:
    files = {}
    for item in items:
        if ref := item.get("fieldRef"):
            path = ref.get("fieldPath", "")
            if path in ("metadata.labels", "metadata.annotations"):
                section = pod["metadata"].get(path.split(".")[1]) or {}
                value = "\n".join(f'{key}="{section[key]}"' for key in sorted(section))
            else:
                value = field_ref(pod, path)
        else:  # resourceFieldRef: the emulator gives no limits to read, as a node with no limit set
            value = ""
        files[item["path"]] = (value.encode(), int(item.get("mode", default_mode)))
    return files


def _hostpath(volume: str, source: Obj) -> Path:
    """The kubelet's hostPath ``type`` check (``pkg/volume/hostpath/hostpath.go``)."""
    path, kind = Path(source.get("path", "")), source.get("type") or ""
    if kind == "DirectoryOrCreate":
        if not path.exists():
            path.mkdir(parents=True, mode=0o755)
        elif not path.is_dir():
            raise MountError(volume, f"hostPath type check failed: {path} is not a directory")
    elif kind == "FileOrCreate":
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o644)
        elif not path.is_file():
            raise MountError(volume, f"hostPath type check failed: {path} is not a file")
    else:
        checks = {
            "Directory": (Path.is_dir, "is not a directory"),
            "File": (Path.is_file, "is not a file"),
            "Socket": (Path.is_socket, "is not a socket file"),
            "CharDevice": (Path.is_char_device, "is not a character device"),
            "BlockDevice": (Path.is_block_device, "is not a block device"),
        }
        if kind in checks:
            check, message = checks[kind]
            if not check(path):
                raise MountError(volume, f"hostPath type check failed: {path} {message}")
        elif not path.exists():  # no type: anything goes, and the bind mount needs something there
            path.mkdir(parents=True, mode=0o755)
    return path


def _volume_files(pod: Obj, volume: Obj, lookup: Lookup, namespace: str) -> dict[str, tuple[bytes, int]] | None:
    """The files of a configMap, secret, downwardAPI or projected volume; None for any other kind."""
    name = volume["name"]
    if source := volume.get("configMap"):
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        data = _config_map_data(lookup, namespace, source.get("name", ""))
        return _key_files("configmap", source, data, name, mode)
    if source := volume.get("secret"):
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        data = _secret_data(lookup, namespace, source.get("secretName", ""))
        return _key_files("secret", {**source, "name": source.get("secretName", "")}, data, name, mode)
    if source := volume.get("downwardAPI"):
        return _downward_files(pod, source.get("items") or [], int(source.get("defaultMode", DEFAULT_MODE)))
    if source := volume.get("projected"):
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        files: dict[str, tuple[bytes, int]] = {}
        for part in source.get("sources") or []:
            if cm := part.get("configMap"):
                files |= _key_files(
                    "configmap", cm, _config_map_data(lookup, namespace, cm.get("name", "")), name, mode
                )
            elif secret := part.get("secret"):
                files |= _key_files(
                    "secret", secret, _secret_data(lookup, namespace, secret.get("name", "")), name, mode
                )
            elif downward := part.get("downwardAPI"):
                files |= _downward_files(pod, downward.get("items") or [], mode)
            elif token := part.get("serviceAccountToken"):
                files[token.get("path", "token")] = (SERVICE_ACCOUNT_TOKEN.encode(), mode)
        return files
    return None


def check_volumes(pod: Obj, lookup: Lookup) -> None:
    """Raise ``MountError`` where ``PodVolumes.prepare`` would, making nothing: for a pod whose
    containers are all simulated, which has no process to see its volumes. A missing ConfigMap or
    Secret, or a kind not emulated, still keeps it in ContainerCreating, as on a node."""
    namespace = pod["metadata"].get("namespace", "default")
    for volume in pod["spec"].get("volumes") or []:
        kinds = [key for key in volume if key != "name"]
        if kinds and kinds[0] not in EMULATED:
            raise MountError(volume["name"], f"{kinds[0]} volumes are not emulated (airflow-gpu emulate kubernetes)")
        _volume_files(pod, volume, lookup, namespace)


class PodVolumes:
    """The volumes of one pod on this host, and what they left to undo."""

    def __init__(self, pod: Obj, root: Path, mount_points: set[Path] | None = None) -> None:
        self.pod = pod
        #: Mount points made on this host, shared by every pod of a cluster; they stay (``_ensure_mount_point``).
        self.mount_points = mount_points if mount_points is not None else set()
        self.root = root / "volumes"
        self.paths: dict[str, Path] = {}
        self.tmpfs: list[Path] = []

    def prepare(self, lookup: Lookup) -> None:
        """Make every volume of the pod, or raise ``MountError`` for the first that cannot be made."""
        namespace = self.pod["metadata"].get("namespace", "default")
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if name in self.paths:
                continue
            directory = self.root / name
            if "hostPath" in volume:
                self.paths[name] = _hostpath(name, volume["hostPath"])
                continue
            kinds = [key for key in volume if key != "name"]
            if kinds and kinds[0] not in EMULATED:  # never run without a volume: fail its mount
                raise MountError(name, f"{kinds[0]} volumes are not emulated (airflow-gpu emulate kubernetes)")
            files = _volume_files(self.pod, volume, lookup, namespace)
            if files is None:  # emptyDir (the API server's default source too): an empty directory
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(0o777)
                empty = volume.get("emptyDir") or {}
                if empty.get("medium") == "Memory":
                    self._mount_tmpfs(name, directory, empty.get("sizeLimit"))
            else:
                _write_files(directory, files)
            self.paths[name] = directory

    def _mount_tmpfs(self, name: str, directory: Path, size_limit: Any) -> None:
        options = "mode=1777" + (f",size={_quantity_bytes(size_limit)}" if size_limit is not None else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise MountError(name, f"mount failed: {done.stderr.strip() or done.returncode}")
        self.tmpfs.append(directory)

    def container_mounts(self, container: Obj) -> list[Obj]:
        """The bind mounts of one container: ``{"source", "target", "readOnly"}``, in spec order."""
        mounts = []
        for mount in container.get("volumeMounts") or []:
            source = self.paths[mount["name"]]
            if sub := mount.get("subPath"):
                source = source / sub
                if not source.exists():  # the kubelet creates a missing subPath as a directory
                    source.mkdir(parents=True, mode=0o777)
            target = Path(mount["mountPath"])
            self.mount_points.update(_ensure_mount_point(target, directory=source.is_dir()))
            mounts.append({"source": str(source), "target": str(target), "readOnly": bool(mount.get("readOnly"))})
        return mounts

    def termination_log(self, container: Obj) -> Obj | None:
        """The container's termination-message file, as the kubelet makes it (empty, mode 0666) and
        bind-mounts it at ``terminationMessagePath``: a mount of ``container_mounts``' shape, or None
        without a path. What the container writes there becomes its terminated state's ``message``."""
        path = container.get("terminationMessagePath")
        if not path:
            return None
        source = self.root / "termination" / str(container["name"])
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(b"")
        source.chmod(0o666)
        target = Path(path)
        self.mount_points.update(_ensure_mount_point(target, directory=False))
        return {"source": str(source), "target": str(target), "readOnly": False}

    def release(self) -> None:
        """Unmount the pod's tmpfs volumes (its containers are gone) and remove the volumes."""
        for directory in self.tmpfs:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)
        self.tmpfs.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _ensure_mount_point(target: Path, directory: bool) -> list[Path]:
    """Make a bind mount's target, as a container runtime makes it in the image; return what was made.

    Made on this host (a mount namespace shares the host's directories) and left there while the
    cluster runs: removing one could detach another container's mount there.
    """
    if target.exists() or target.is_symlink():
        return []
    made = [parent for parent in reversed(target.parents) if not parent.exists()] + [target]
    if directory:
        target.mkdir(parents=True, mode=0o755)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(mode=stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    return made

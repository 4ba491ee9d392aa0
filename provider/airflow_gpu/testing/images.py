"""Images as the emulators know them: what a registry's image config says, and what the image holds.

A real container runs its image's ``Entrypoint`` followed by the command (or, without one, the
image's ``Cmd``), as Docker and containerd do; the emulators run that argv as a local process. An
image is declared to an emulator with an ``Image``: its ``entrypoint`` and ``cmd`` (as its config
blob carries them), the programs it lacks (``missing``: a distroless image has no ``sh``, a slim one
no ``python3``) and the files it adds (``files``: path -> text, such as an entrypoint script). An
image not declared (``UNDECLARED``) has no entrypoint, lacks nothing (the host's programs are its
own) and its ``Cmd`` is ``true``: a job that names no command ends at once, successfully.

What the runtime does with that argv is what runc reports (``start_error``): a program the image
lacks cannot be executed, worded as ECS passes Docker's error on for AWS Batch
(``CannotStartContainerError: ... exec: "/bin/sh": stat /bin/sh: no such file or directory``, or
``exec: "python3": executable file not found in $PATH`` for a name looked up in ``PATH``), or as
containerd's CRI passes it to the kubelet (``containerd_start_error``: the container's terminated state
``StartError``, exit code 128, on Kubernetes). Inside
the container, ``PATH`` leads to the host's programs less the missing ones (``container_path``),
so that a shell script's ``command -v python3`` sees what the image has.

``RegistryApp`` serves the declared images' configs with the OCI distribution API (an image index
naming a linux/amd64 and a linux/arm64 manifest, each manifest's config blob, content-addressed),
as a registry mirror does: the upstream registry rides in containerd's ``ns`` query parameter.
Every reference has a config there (an undeclared one, the plain one) except those ``missing``:
404 ``MANIFEST_UNKNOWN``, as a registry answers for a tag that does not exist.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import shutil
import stat
import tempfile
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_gpu.images.registry import INDEX_TYPES, MANIFEST_TYPES, parse_reference

#: Docker's reason for a container that could not be started, as ECS passes it on (EC2 launch type).
RUNC_PREFIX = (
    "CannotStartContainerError: Error response from daemon: failed to create task for container: "
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container "
    "process: "
)
NO_COMMAND = "CannotStartContainerError: Error response from daemon: No command specified"


@dataclass(frozen=True)
class Image:
    """One image as its registry config and file system describe it."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    missing: frozenset[str] = frozenset()  # program names it lacks: "sh", "python3"...
    files: Mapping[str, str] = field(default_factory=dict)  # absolute path -> text (executable)

    def lacks(self, program: str) -> bool:
        return program in self.missing or posixpath.basename(program) in self.missing

    def config_blob(self) -> dict[str, Any]:
        """The image config as a registry serves it (``null`` where the image sets nothing)."""
        config = {"Entrypoint": list(self.entrypoint) or None, "Cmd": list(self.cmd) or None, "Env": ["PATH=/usr/bin"]}
        return {"architecture": "amd64", "os": "linux", "config": config, "rootfs": {"type": "layers", "diff_ids": []}}


#: What an image nobody declared is: no ENTRYPOINT, every program of the host, a ``Cmd`` that succeeds.
UNDECLARED = Image(cmd=("true",))


def distroless(entrypoint: Iterable[str] = (), cmd: Iterable[str] = (), python: bool = False) -> Image:
    """A distroless image (``gcr.io/distroless/...``): no shell; ``python`` says whether it has python3."""
    missing = {"sh", "bash", "dash"} | (set() if python else {"python3", "python"})
    return Image(tuple(entrypoint), tuple(cmd), frozenset(missing))


def normalized(image: str) -> str:
    """The fully qualified reference (``busybox`` is ``docker.io/library/busybox:latest``)."""
    return str(parse_reference(image))


def pull_error(image: str) -> str:
    """Docker's answer, as ECS passes it on, for a reference whose tag does not exist."""
    return f"CannotPullContainerError: Error response from daemon: manifest for {image} not found: manifest unknown"


def _exec_failure(program: str) -> str:
    """runc's own words for a first program the image does not have (a path, or a name looked up in PATH)."""
    if "/" in program:
        return f'exec: "{program}": stat {program}: no such file or directory'
    return f'exec: "{program}": executable file not found in $PATH'


def start_error(program: str) -> str:
    """runc's refusal to execute ``program``, which the image does not have, as Batch reports it."""
    return f"{RUNC_PREFIX}{_exec_failure(program)}: unknown"


#: containerd's CRI wording of the same refusal (``StartContainer``), as the kubelet shows it.
CONTAINERD_PREFIX = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: "
)


def containerd_start_error(program: str) -> str:
    """runc's refusal to execute ``program`` as containerd reports it to the kubelet: the message of the
    container's terminated state (reason ``StartError``, exit code 128) and of its ``Failed`` event."""
    return f"{CONTAINERD_PREFIX}{_exec_failure(program)}: unknown"


class ImageSet:
    """The images an emulator knows, by normalized reference; ``root`` holds their files and PATHs."""

    def __init__(
        self, images: Mapping[str, Image] | None = None, missing: Iterable[str] = (), root: str | None = None
    ) -> None:
        self._images = {normalized(ref): image for ref, image in (images or {}).items()}
        self._missing = {normalized(ref) for ref in missing}
        self._given_root = Path(root) if root else None
        self._lock = threading.Lock()
        self._paths: dict[str, str] = {}

    def declare(self, reference: str, image: Image) -> None:
        with self._lock:
            self._images[normalized(reference)] = image
            self._paths.pop(normalized(reference), None)

    def exists(self, reference: str) -> bool:
        return normalized(reference) not in self._missing

    def get(self, reference: str) -> Image:
        return self._images.get(normalized(reference), UNDECLARED)

    def declared(self, reference: str) -> bool:
        """Whether ``reference`` was declared (an undeclared image lacks nothing and has no ENTRYPOINT)."""
        return normalized(reference) in self._images

    def argv(self, reference: str, command: Iterable[str]) -> list[str]:
        """What the container runs: ENTRYPOINT + (command or Cmd), the image's files at their host paths."""
        image = self.get(reference)
        argv = [*image.entrypoint, *(list(command) or image.cmd)]
        if not image.files:
            return argv
        files = self._files(reference, image)
        return [files.get(a, a) for a in argv]

    def refusal(self, reference: str, argv: list[str]) -> str | None:
        """Why the runtime cannot start ``argv`` in this image (None: it can)."""
        if not argv:
            return NO_COMMAND
        image = self.get(reference)
        return start_error(argv[0]) if image.lacks(argv[0]) else None

    def environment(self, reference: str, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the ``PATH`` of the image: the host's programs, less those it lacks."""
        image = self.get(reference)
        if not image.missing:
            return dict(env)
        return {**env, "PATH": self._path(reference, image, env.get("PATH", ""))}

    @functools.cached_property
    def _root(self) -> Path:
        """Where the images' files and PATHs are made, when first needed: most sets never need one, and every
        emulator has a set (the suite left some 30,000 empty directories in /tmp). One made here goes with
        the set, or with the process at the latest; one given is the caller's."""
        if self._given_root is not None:
            return self._given_root
        made = Path(tempfile.mkdtemp(prefix="emulated-images-"))
        weakref.finalize(self, shutil.rmtree, made, True)
        return made

    def _files(self, reference: str, image: Image) -> dict[str, str]:
        base = self._root / hashlib.sha256(normalized(reference).encode()).hexdigest()[:16] / "files"
        placed = {}
        for path, text in image.files.items():
            target = base / path.lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            placed[path] = str(target)
        return placed

    def _path(self, reference: str, image: Image, host_path: str) -> str:
        """A directory of links to every program on ``host_path`` except the missing ones (made once)."""
        key = normalized(reference)
        with self._lock:
            if key in self._paths:
                return self._paths[key]
            directory = self._root / hashlib.sha256(key.encode()).hexdigest()[:16] / "bin"
            directory.mkdir(parents=True, exist_ok=True)
            for folder in host_path.split(os.pathsep):
                if not folder or not Path(folder).is_dir():
                    continue
                for entry in os.scandir(folder):
                    link = directory / entry.name
                    if image.lacks(entry.name) or link.exists() or link.is_symlink():
                        continue
                    if entry.is_file() and os.access(entry.path, os.X_OK):
                        link.symlink_to(entry.path)
            self._paths[key] = str(directory)
            return self._paths[key]


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class RegistryApp:
    """A WSGI layer serving ``/v2/`` (the distribution API, read-only) for ``images``; else ``app``."""

    def __init__(self, images: ImageSet, app: Callable[..., Iterable[bytes]]) -> None:
        self.images, self.app = images, app
        self._by_digest: dict[str, tuple[str, bytes]] = {}  # what a tag's answers named, by digest
        self._lock = threading.Lock()

    def _documents(self, reference: str) -> dict[str, tuple[str, bytes]]:
        """The index, the two manifests and the config blob of ``reference``, by tag or digest."""
        image = self.images.get(reference)
        config = json.dumps(image.config_blob(), sort_keys=True).encode()
        documents: dict[str, tuple[str, bytes]] = {
            _digest(config): ("application/vnd.oci.image.config.v1+json", config)
        }
        entries = []
        for arch in ("arm64", "amd64"):  # the amd64 one second: a client must choose, not take the first
            blob = config if arch == "amd64" else json.dumps({**image.config_blob(), "architecture": arch}).encode()
            documents[_digest(blob)] = ("application/vnd.oci.image.config.v1+json", blob)
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST_TYPES[0],
                    "config": {
                        "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": _digest(blob),
                        "size": len(blob),
                    },
                    "layers": [],
                }
            ).encode()
            documents[_digest(manifest)] = (MANIFEST_TYPES[0], manifest)
            entries.append(
                {"mediaType": MANIFEST_TYPES[0], "digest": _digest(manifest), "size": len(manifest),
                 "platform": {"os": "linux", "architecture": arch}}
            )  # fmt: skip
        index = json.dumps({"schemaVersion": 2, "mediaType": INDEX_TYPES[0], "manifests": entries}).encode()
        documents["index"] = (INDEX_TYPES[0], index)
        return documents

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not path.startswith("/v2/"):
            return self.app(environ, start_response)
        if path == "/v2/":
            return self._answer(start_response, "200 OK", "application/json", b"{}")
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        registry = (query.get("ns") or ["docker.io"])[0]
        repository, kind, version = self._split(path[len("/v2/") :])
        if not repository:
            return self._error(start_response, "404 Not Found", "NAME_UNKNOWN", "repository name not known")
        if not version.startswith("sha256:"):  # a tag: the image's index, its documents kept by digest
            reference = f"{registry}/{repository}:{version}"
            if kind != "manifests" or not self.images.exists(reference):
                return self._error(start_response, "404 Not Found", "MANIFEST_UNKNOWN", "manifest unknown")
            documents = self._documents(reference)
            with self._lock:
                self._by_digest.update({_digest(body): (media, body) for media, body in documents.values()})
            media, body = documents["index"]
        else:
            with self._lock:
                found = self._by_digest.get(version)
            if found is None or (kind == "blobs") != ("config" in found[0]):
                code = "BLOB_UNKNOWN" if kind == "blobs" else "MANIFEST_UNKNOWN"
                return self._error(start_response, "404 Not Found", code, f"{kind[:-1]} unknown")
            media, body = found
        return self._answer(start_response, "200 OK", media, body, {"Docker-Content-Digest": _digest(body)})

    @staticmethod
    def _split(rest: str) -> tuple[str, str, str]:
        for kind in ("manifests", "blobs"):
            marker = f"/{kind}/"
            if marker in rest:
                repository, _, version = rest.rpartition(marker)
                return repository, kind, version
        return "", "", ""

    @staticmethod
    def _answer(
        start_response: Callable[..., Any],
        status: str,
        media: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> list[bytes]:
        start_response(status, [("Content-Type", media), ("Content-Length", str(len(body))), *(headers or {}).items()])
        return [body]

    def _error(self, start_response: Callable[..., Any], status: str, code: str, message: str) -> list[bytes]:
        body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
        return self._answer(start_response, status, "application/json", body)

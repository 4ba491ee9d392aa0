"""The emulators' image model (``testing.images``): Docker's ENTRYPOINT + CMD, runc's refusals, and the
registry mirror that serves the declared configs (read back with the provider's own client)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from airflow_gpu.images.registry import ImageConfig, RegistryClient, RegistryError
from airflow_gpu.testing.images import Image, ImageSet, RegistryApp, distroless


def test_the_entrypoint_receives_the_command_or_else_the_images_cmd() -> None:
    images = ImageSet({"team/train:1": Image(entrypoint=("python", "train.py"), cmd=("--epochs", "1"))})
    assert images.argv("docker.io/team/train:1", ["--epochs", "3"]) == ["python", "train.py", "--epochs", "3"]
    assert images.argv("team/train:1", []) == ["python", "train.py", "--epochs", "1"]
    assert images.argv("other:1", ["echo", "hi"]) == ["echo", "hi"]  # undeclared: no ENTRYPOINT


def test_a_program_the_image_lacks_cannot_start_as_runc_words_it() -> None:
    images = ImageSet({"gcr.io/distroless/static:nonroot": distroless()})
    by_path = images.refusal("gcr.io/distroless/static:nonroot", ["/bin/sh", "-c", "true"])
    by_name = images.refusal("gcr.io/distroless/static:nonroot", ["python3", "-c", "pass"])
    assert by_path is not None and by_path.startswith("CannotStartContainerError: Error response from daemon")
    assert 'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown' in by_path
    assert by_name is not None and 'exec: "python3": executable file not found in $PATH: unknown' in by_name
    assert images.refusal("gcr.io/distroless/static:nonroot", ["printf", "x"]) is None
    assert images.refusal("busybox", ["/bin/sh"]) is None


def test_inside_the_container_path_has_no_missing_program() -> None:
    images = ImageSet({"slim:1": Image(missing=frozenset({"python3"}))})
    env = images.environment("slim:1", {"PATH": os.environ["PATH"]})
    found = subprocess.run(
        ["/bin/sh", "-c", "command -v python3 || echo none; command -v printf"], env=env, capture_output=True, text=True
    ).stdout.split()
    assert found[0] == "none" and found[1].endswith("printf")


def test_the_images_files_run_where_the_entrypoint_names_them() -> None:
    script = '#!/bin/sh\necho entry\nexec "$@"\n'
    images = ImageSet({"ngc:1": Image(entrypoint=("/opt/entry.sh",), files={"/opt/entry.sh": script})})
    argv = images.argv("ngc:1", ["echo", "command"])
    assert subprocess.run(argv, capture_output=True, text=True).stdout.split() == ["entry", "command"]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def mirror() -> Iterator[tuple[str, ImageSet]]:
    images = ImageSet(
        {"nvcr.io/nvidia/pytorch:25.01-py3": Image(entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",))},
        missing=["team/gone:1"],
    )

    def fallback(environ: dict[str, object], start_response: object) -> list[bytes]:
        raise AssertionError("only /v2/ is asked")

    server = make_server("127.0.0.1", 0, RegistryApp(images, fallback), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", images
    finally:
        server.shutdown()
        server.server_close()


def test_the_mirror_serves_declared_configs_through_an_index(mirror: tuple[str, ImageSet]) -> None:
    url, images = mirror
    client = RegistryClient(mirror=url)
    assert client.config("nvcr.io/nvidia/pytorch:25.01-py3") == ImageConfig(("/opt/nvidia/nvidia_entrypoint.sh",), None)
    assert client.config("pytorch/pytorch:2.5.1") == ImageConfig(None, ("true",))  # undeclared
    images.declare("pytorch/pytorch:2.5.1", Image(entrypoint=("tini", "--")))
    assert RegistryClient(mirror=url).config("pytorch/pytorch:2.5.1").entrypoint == ("tini", "--")
    with pytest.raises(RegistryError, match="HTTP 404"):
        client.config("team/gone:1")

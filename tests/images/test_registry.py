"""``images.registry`` against a local HTTP server that speaks the OCI distribution API.

The server is this test's own fake, at the boundary the client owns (HTTP): it answers as Docker
Hub does (distribution spec; Docker's token authentication spec): 401 with ``WWW-Authenticate:
Bearer realm=...,service=...,scope=...`` until a token from ``realm`` comes back, an image index
whose linux/amd64 entry is not the first, manifests and the config blob by digest, the blob through
a redirect to another host (as S3 or a CDN serves it) that refuses any ``Authorization`` header.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_gpu.images import registry
from airflow_gpu.images.registry import ImageConfig, RegistryClient, RegistryError, parse_reference

TOKEN = "anonymous-token"


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class Fake:
    """The registry's content and what it was asked."""

    def __init__(self, entrypoint: list[str] | None, cmd: list[str] | None) -> None:
        self.config = json.dumps(
            {"architecture": "amd64", "os": "linux", "config": {"Entrypoint": entrypoint, "Cmd": cmd}}
        ).encode()
        arm = json.dumps({"architecture": "arm64", "config": {"Entrypoint": ["wrong"]}}).encode()
        self.blobs = {digest(self.config): self.config, digest(arm): arm}
        self.manifests: dict[str, bytes] = {}
        entries = []
        for arch, blob in (("arm64", arm), ("amd64", self.config)):
            config = {"digest": digest(blob), "size": len(blob)}
            manifest = json.dumps({"mediaType": registry.MANIFEST_TYPES[0], "config": config, "layers": []}).encode()
            self.manifests[digest(manifest)] = manifest
            entries.append({"digest": digest(manifest), "platform": {"os": "linux", "architecture": arch}})
        self.manifests["2.5"] = json.dumps({"mediaType": registry.INDEX_TYPES[0], "manifests": entries}).encode()
        self.requests: list[tuple[str, str | None]] = []
        self.token_queries: list[dict[str, list[str]]] = []
        self.port = 0


@pytest.fixture
def fake() -> Iterator[Fake]:
    content = Fake(["/opt/nvidia/nvidia_entrypoint.sh"], ["/bin/bash"])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, status: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            auth = self.headers.get("Authorization")
            content.requests.append((url.path, auth))
            if url.path == "/token":
                content.token_queries.append(parse_qs(url.query))
                return self.answer(200, json.dumps({"token": TOKEN}).encode())
            if url.path.startswith("/cdn/"):  # another host, as S3: a second authentication is refused
                if auth:
                    return self.answer(400, b'{"error": "Only one auth mechanism allowed"}')
                return self.answer(200, content.blobs[url.path[len("/cdn/") :]])
            if auth != f"Bearer {TOKEN}":
                realm = f"http://127.0.0.1:{content.port}/token"
                challenge = f'Bearer realm="{realm}",service="registry.test",scope="repository:nvidia/pytorch:pull"'
                return self.answer(401, b"{}", {"WWW-Authenticate": challenge})
            prefix = "/v2/nvidia/pytorch/"
            kind, _, version = url.path[len(prefix) :].partition("/")
            if kind == "manifests" and version in content.manifests:
                body = content.manifests[version]
                media = json.loads(body)["mediaType"]
                assert media in (self.headers.get("Accept") or "")
                return self.answer(200, body, {"Content-Type": media})
            if kind == "blobs" and version in content.blobs:  # redirected, as registries serve blobs
                return self.answer(307, b"", {"Location": f"http://localhost:{content.port}/cdn/{version}"})
            return self.answer(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}')

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    content.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    registry.forget()
    try:
        yield content
    finally:
        server.shutdown()
        server.server_close()
        registry.forget()


def test_the_config_is_read_through_the_token_flow_and_the_index(fake: Fake) -> None:
    client = RegistryClient(mirror=f"http://127.0.0.1:{fake.port}")
    config = client.config("nvcr.io/nvidia/pytorch:2.5")
    assert config == ImageConfig(("/opt/nvidia/nvidia_entrypoint.sh",), ("/bin/bash",))  # amd64's, not arm64's
    assert fake.token_queries == [{"service": ["registry.test"], "scope": ["repository:nvidia/pytorch:pull"]}]
    cdn = [auth for path, auth in fake.requests if path.startswith("/cdn/")]
    assert cdn == [None]  # the token never follows the redirect


def test_a_mirror_is_told_the_upstream_registry_as_containerd_does(fake: Fake) -> None:
    seen: list[str] = []
    client = RegistryClient(mirror=f"http://127.0.0.1:{fake.port}/")
    real_get = client._get
    client._get = lambda url, accept, auth: seen.append(url) or real_get(url, accept, auth)  # type: ignore[method-assign]
    client.config("nvcr.io/nvidia/pytorch:2.5")
    assert seen[0] == f"http://127.0.0.1:{fake.port}/v2/nvidia/pytorch/manifests/2.5?ns=nvcr.io"


def test_a_missing_tag_and_an_unreachable_registry_are_registry_errors(fake: Fake) -> None:
    with pytest.raises(RegistryError, match="HTTP 404"):
        RegistryClient(mirror=f"http://127.0.0.1:{fake.port}").config("nvcr.io/nvidia/pytorch:0.0")
    with pytest.raises(RegistryError, match="could not be read"):
        RegistryClient(mirror="http://127.0.0.1:9", timeout=2).config("busybox")


def test_answers_are_cached_per_reference_failures_included(fake: Fake) -> None:
    client = RegistryClient(mirror=f"http://127.0.0.1:{fake.port}")
    for _ in range(3):
        assert registry.image_config("nvcr.io/nvidia/pytorch:2.5", client).entrypoint is not None
        with pytest.raises(RegistryError):
            registry.image_config("nvcr.io/nvidia/pytorch:0.0", client)
    asked = [path.rsplit("/", 1)[-1] for path, _ in fake.requests if "/manifests/" in path]
    # once per process each: 2.5 once refused (401), once with the token; 0.0 with that token, once
    assert asked.count("2.5") == 2 and asked.count("0.0") == 1


def test_basic_credentials_are_sent_with_the_token_request(fake: Fake) -> None:
    client = RegistryClient(mirror=f"http://127.0.0.1:{fake.port}", credentials=lambda host: "Basic QVdTOnNlY3JldA==")
    client.config("123456789012.dkr.ecr.us-east-1.amazonaws.com/nvidia/pytorch:2.5")
    assert ("/token", "Basic QVdTOnNlY3JldA==") in fake.requests


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("busybox", ("docker.io", "library/busybox", "latest", None)),
        ("pytorch/pytorch:2.5.1-cuda12.4", ("docker.io", "pytorch/pytorch", "2.5.1-cuda12.4", None)),
        ("nvcr.io/nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3", None)),
        ("localhost:5000/train", ("localhost:5000", "train", "latest", None)),
        ("ghcr.io/o/r@sha256:" + "a" * 64, ("ghcr.io", "o/r", None, "sha256:" + "a" * 64)),
    ],
)  # fmt: skip
def test_references_are_split_as_docker_does(image: str, expected: tuple[str, str, str | None, str | None]) -> None:
    ref = parse_reference(image)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected
    assert ref.api_host == ("registry-1.docker.io" if expected[0] == "docker.io" else expected[0])

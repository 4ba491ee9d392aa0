"""What an image runs by itself: its ``Entrypoint`` and ``Cmd``, read from the registry that holds it.

AWS Batch has no ``entryPoint`` (``ContainerProperties`` in the Batch API: a job's ``command`` is
Docker's CMD), so the image's ENTRYPOINT stays and receives the command as its arguments. Whether
the profiler may wrap the command depends on it (``images.entrypoint``), and only the image's
config says what it is. This client reads that config as Docker and containerd do, with the OCI
distribution API and nothing but the standard library:

1. ``GET /v2/<repository>/manifests/<tag>``, accepting an image index (OCI, or Docker's manifest
   list) and single manifests; an index names the ``linux/amd64`` manifest, fetched by digest;
2. the manifest's ``config`` blob, ``GET /v2/<repository>/blobs/<digest>``: its ``config.Entrypoint``
   and ``config.Cmd``.

A registry that answers 401 with ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``
(Docker Hub, nvcr.io, ghcr.io, public.ecr.aws) gives an anonymous token at ``realm``; with
``credentials`` (a ``Basic ...`` header for the registry, such as ECR's ``GetAuthorizationToken``
gives) the token is asked with it, or the header is sent as is where the registry asks for Basic.
The ``Authorization`` header never follows a redirect (blobs are served from S3 or a CDN, which
refuse a second authentication).

``mirror`` sends every request to one host, as Docker's ``registry-mirrors`` do for Docker Hub and
containerd's ``hosts.toml`` mirrors do for any registry: the repository path is the same and the
upstream registry rides in the ``ns`` query parameter, as containerd sends it. Answers are cached
per reference for the life of the process, failures included, so that a task resubmitting its
job asks once; a lookup takes at most ``timeout`` seconds per request.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DOCKER_HUB = "docker.io"
#: Where Docker Hub's registry API answers (``docker.io`` is only its name in references).
DOCKER_HUB_API = "registry-1.docker.io"
DEFAULT_TAG = "latest"
TIMEOUT = 5.0
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
PLATFORM = {"os": "linux", "architecture": "amd64"}  # what AWS Batch's and most GPU hosts run

#: ``registry host -> Authorization header`` (``Basic ...``), or None for anonymous access.
Credentials = Callable[[str], "str | None"]


class RegistryError(Exception):
    """The image's config could not be read: the message says why, for the task log."""


@dataclass(frozen=True)
class Reference:
    """An image reference split as ``ParseNormalizedNamed`` does (``busybox`` is
    ``docker.io/library/busybox:latest``)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def version(self) -> str:
        """What the manifest is asked by: the digest when the reference pins one."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def __str__(self) -> str:
        tail = f"@{self.digest}" if self.digest else f":{self.tag or DEFAULT_TAG}"
        return f"{self.registry}/{self.repository}{tail}"


def parse_reference(image: str) -> Reference:
    """``image`` as registry, repository, tag and digest; a bare name is Docker Hub's ``library/``."""
    rest, _, digest = image.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    name, colon, tag = path.rpartition(":")
    if not colon or "/" in tag:
        name, tag = path, ""
    if not name:
        raise RegistryError(f"{image!r} is not an image reference")
    return Reference(registry, name, tag or (None if digest else DEFAULT_TAG), digest or None)


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs when a container names no command of its own (``None``: not set)."""

    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None


def _strings(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RegistryError(f"the image config holds {value!r} where a list of strings belongs")


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Bearer realm="...",service="..."`` as (scheme, parameters)."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    for part in _split_params(rest):
        key, _, value = part.partition("=")
        params[key.strip().lower()] = value.strip().strip('"')
    return scheme.lower(), params


def _split_params(text: str) -> list[str]:
    """Comma-separated ``key="value"`` pairs; commas inside quotes (a scope's actions) stay."""
    parts, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


class RegistryClient:
    """Reads image configs from registries (or one ``mirror``); ``credentials`` per registry host."""

    def __init__(
        self, *, mirror: str | None = None, credentials: Credentials | None = None, timeout: float = TIMEOUT
    ) -> None:
        self.mirror = mirror.rstrip("/") if mirror else None
        self.credentials = credentials
        self.timeout = timeout
        self._tokens: dict[tuple[str, str], str] = {}  # (host, scope) -> Authorization header

    def config(self, image: str) -> ImageConfig:
        """The image's ``Entrypoint`` and ``Cmd`` (``RegistryError`` when they cannot be read)."""
        reference = parse_reference(image)
        manifest = self._json(reference, f"manifests/{reference.version}", ACCEPT)
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            manifest = self._json(reference, f"manifests/{self._platform_digest(manifest, reference)}", ACCEPT)
        digest = (manifest.get("config") or {}).get("digest")
        if not isinstance(digest, str):
            raise RegistryError(f"the manifest of {reference} names no config blob")
        blob = self._json(reference, f"blobs/{digest}", "application/json, */*")
        config = blob.get("config") or {}
        return ImageConfig(_strings(config.get("Entrypoint")), _strings(config.get("Cmd")))

    @staticmethod
    def _platform_digest(index: Mapping[str, Any], reference: Reference) -> str:
        for entry in index.get("manifests") or []:
            platform = entry.get("platform") or {}
            if all(platform.get(k) == v for k, v in PLATFORM.items()) and isinstance(entry.get("digest"), str):
                return str(entry["digest"])
        raise RegistryError(f"{reference} has no linux/amd64 image")

    def _url(self, reference: Reference, tail: str) -> str:
        path = f"/v2/{reference.repository}/{tail}"
        if self.mirror:
            return f"{self.mirror}{path}?{urllib.parse.urlencode({'ns': reference.registry})}"
        scheme = "http" if reference.registry.split(":")[0] in ("localhost", "127.0.0.1") else "https"
        return f"{scheme}://{reference.api_host}{path}"

    def _json(self, reference: Reference, tail: str, accept: str) -> dict[str, Any]:
        url = self._url(reference, tail)
        host = urllib.parse.urlsplit(url).netloc
        scope = f"repository:{reference.repository}:pull"
        authorization, fresh = self._tokens.get((host, scope)), False
        while True:
            try:
                body = self._get(url, accept, authorization)
                break
            except urllib.error.HTTPError as error:
                challenge = error.headers.get("WWW-Authenticate") if error.code == 401 else None
                if not challenge or fresh:
                    refused = " (the credentials were refused)" if fresh else ""
                    raise RegistryError(f"{reference}: {url} answered HTTP {error.code}{refused}") from error
                authorization, fresh = self._authorize(reference, challenge, scope), True
                self._tokens[(host, scope)] = authorization
            except (OSError, ValueError) as error:  # URLError, timeouts, resets
                raise RegistryError(f"{reference}: {url} could not be read ({error})") from error
        try:
            value = json.loads(body)
        except ValueError as error:
            raise RegistryError(f"{reference}: {url} answered something that is not JSON") from error
        if not isinstance(value, dict):
            raise RegistryError(f"{reference}: {url} answered something that is not a JSON object")
        return value

    def _get(self, url: str, accept: str, authorization: str | None) -> bytes:
        request = urllib.request.Request(url, headers={"Accept": accept})
        if authorization:
            request.add_unredirected_header("Authorization", authorization)  # never to S3 or a CDN
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return bytes(response.read())

    def _authorize(self, reference: Reference, challenge: str, scope: str) -> str:
        """The Authorization header the registry's challenge asks for (anonymous where it allows)."""
        scheme, params = _challenge(challenge)
        basic = self.credentials(reference.registry) if self.credentials else None
        if scheme == "basic":
            if basic is None:
                raise RegistryError(f"{reference}: the registry wants credentials, and none were given")
            return basic
        realm = params.get("realm")
        if scheme != "bearer" or not realm:
            raise RegistryError(f"{reference}: unknown authentication challenge {challenge!r}")
        query = {k: v for k, v in (("service", params.get("service")), ("scope", params.get("scope") or scope)) if v}
        request = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(query)}")
        if basic:
            request.add_unredirected_header("Authorization", basic)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError) as error:
            raise RegistryError(f"{reference}: no token from {realm} ({error})") from error
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str):
            raise RegistryError(f"{reference}: {realm} gave no token")
        return f"Bearer {token}"


_cache: dict[tuple[str | None, str], ImageConfig | RegistryError] = {}
_cache_lock = threading.Lock()


def image_config(image: str, client: RegistryClient) -> ImageConfig:
    """``client.config(image)``, asked once per process for each (mirror, image); a failure is kept too."""
    key = (client.mirror, image)
    with _cache_lock:
        known = _cache.get(key)
    if known is None:
        try:
            known = client.config(image)
        except RegistryError as error:
            known = error
        with _cache_lock:
            _cache[key] = known
    if isinstance(known, RegistryError):
        raise known
    return known


def forget() -> None:
    """Empty the per-process cache (tests; a long-lived process that wants a fresh read)."""
    with _cache_lock:
        _cache.clear()

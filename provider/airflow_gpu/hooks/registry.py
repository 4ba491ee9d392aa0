"""An image's ENTRYPOINT as the worker can read it: the registry client with the task's AWS credentials.

``images.registry`` reads image configs anonymously; an Amazon ECR repository needs credentials,
which are the operator's AWS connection's: ``ecr:GetAuthorizationToken`` gives a token that the
registry API takes as HTTP Basic (the ECR User Guide, "Private registry authentication"), then
``ecr:BatchGetImage`` and ``ecr:GetDownloadUrlForLayer`` read the manifest and the config blob.

Where the configs are read from can be set, as Docker's ``registry-mirrors`` are: the connection's
extra ``registry_mirror`` (the AWS Batch emulator prints one), else ``[gpu] registry_mirror``
(``AIRFLOW__GPU__REGISTRY_MIRROR``). A mirror serves every registry, the upstream one named in
containerd's ``ns`` query parameter.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_gpu.images.registry import ImageConfig, RegistryClient, RegistryError, image_config

#: ``<account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]``: a private ECR registry.
ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


def registry_mirror(extra: dict[str, Any] | None) -> str | None:
    """The mirror to read image configs from: the connection's, else Airflow's ``[gpu] registry_mirror``."""
    mirror = (extra or {}).get("registry_mirror")
    if mirror:
        return str(mirror)
    from airflow.configuration import conf

    return conf.get("gpu", "registry_mirror", fallback=None) or None


def ecr_credentials(aws_hook: Any) -> Any:
    """``registry host -> "Basic <token>"`` for ECR registries, from the hook's AWS credentials."""

    def credentials(registry: str) -> str | None:
        match = ECR_HOST.match(registry)
        if match is None:
            return None
        account, region = match.groups()
        endpoint = aws_hook.conn_config.get_service_endpoint_url("ecr")
        client = aws_hook.get_session(region_name=region).client("ecr", endpoint_url=endpoint, config=aws_hook.config)
        data = client.get_authorization_token(registryIds=[account])["authorizationData"][0]
        return f"Basic {data['authorizationToken']}"  # base64 of "AWS:<password>", as Basic wants it

    return credentials


def read_entrypoint(aws_hook: Any, image: str) -> tuple[tuple[str, ...] | None, str | None]:
    """The image's ENTRYPOINT (``()``: none) and None, or None and why it could not be read."""
    try:
        extra = aws_hook.conn_config.extra_config
    except Exception:  # no connection: boto3's own credentials, and no extra to read
        extra = {}
    client = RegistryClient(mirror=registry_mirror(extra), credentials=_safe(ecr_credentials(aws_hook)))
    try:
        config: ImageConfig = image_config(image, client)
    except RegistryError as error:
        return None, str(error)
    return config.entrypoint or (), None


def _safe(credentials: Any) -> Any:
    """Credentials that fail (no ``ecr:GetAuthorizationToken``) are a registry error, not a crash."""

    def wrapped(registry: str) -> str | None:
        try:
            return credentials(registry)  # type: ignore[no-any-return]
        except Exception as error:
            raise RegistryError(f"no ECR credentials for {registry}: {type(error).__name__}: {error}") from error

    return wrapped

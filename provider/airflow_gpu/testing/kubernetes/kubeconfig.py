"""A kubeconfig that points the ``kubernetes`` client (and so Airflow's connection) at an API URL."""

from __future__ import annotations

import json

#: The emulator's administrator (``rbac``): what a kubeconfig carries unless it is given a ServiceAccount's token.
ADMIN_TOKEN = "emulator"


def kubeconfig_text(
    server: str, context: str = "airflow-gpu-emulator", namespace: str = "default", token: str = ADMIN_TOKEN
) -> str:
    """A kubeconfig with one cluster, one context and a token user; JSON is valid YAML. A ServiceAccount's
    token (``rbac``, from the TokenRequest API) makes every request the account's, held to its RBAC roles."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"

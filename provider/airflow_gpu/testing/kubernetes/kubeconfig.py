"""A kubeconfig that points the ``kubernetes`` client (and so Airflow's connection) at an API URL."""

from __future__ import annotations

import json


def kubeconfig_text(server: str, context: str = "airflow-gpu-emulator", namespace: str = "default") -> str:
    """A kubeconfig with one cluster, one context and a token user; JSON is valid YAML."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": {"token": "emulator"}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"

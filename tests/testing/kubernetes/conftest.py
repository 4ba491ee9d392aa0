"""Helpers shared by the emulator tests: a real ``kubernetes`` client bound to the running emulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from airflow_gpu.testing import polling
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

T = TypeVar("T")


@pytest.fixture
def core(kubernetes_emulator: KubernetesEmulator) -> client.CoreV1Api:
    """The unmodified ``kubernetes`` client, configured from the emulator's kubeconfig file."""
    api_client = config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path))
    return client.CoreV1Api(api_client)


@pytest.fixture
def batch(core: client.CoreV1Api) -> client.BatchV1Api:
    """``batch/v1`` through the same unmodified client."""
    return client.BatchV1Api(core.api_client)


def wait_for(probe: Callable[[], T | None], timeout: float = 20.0) -> T:
    """Poll ``probe`` until it returns something truthy (tests never sleep a fixed time)."""
    return polling.wait_for(probe, timeout)


def pod_manifest(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {"app": "test"})
    container = {"name": "base", "image": "busybox", "command": command}
    container.update(spec.pop("container", {}))
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def phase_is(core: client.CoreV1Api, name: str, *phases: str) -> Callable[[], Any]:
    def probe() -> Any:
        pod = core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase in phases else None

    return probe

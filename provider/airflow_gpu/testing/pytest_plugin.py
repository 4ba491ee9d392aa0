"""pytest fixtures for GPU DAG tests without a cluster, registered through the ``pytest11`` entry point.

This module is imported by every pytest run of everyone who installs the provider, so it imports
nothing but pytest at load time; the emulator is imported when a fixture is first used.

Fixtures:

``kubernetes_emulator``
    A running ``KubernetesEmulator`` with the demo cluster (two spot 8x H100 nodes, an on-demand
    4x L4 node, a CPU node) and ``.kubeconfig_path``. Each test gets a fresh cluster; every process
    it started is stopped when the test ends, passed or failed.
``kubernetes_default_connection``
    The emulator, with Airflow's ``kubernetes_default`` connection pointed at it for the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator


@pytest.fixture
def kubernetes_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubernetesEmulator]:
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

    emulator = KubernetesEmulator("demo")
    emulator.start()
    try:
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def kubernetes_default_connection(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch
) -> KubernetesEmulator:
    connection = {
        "conn_type": "kubernetes",
        "extra": {"kube_config_path": str(kubernetes_emulator.kubeconfig_path), "namespace": "default"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    return kubernetes_emulator

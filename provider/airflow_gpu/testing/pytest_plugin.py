"""pytest fixtures for GPU DAG tests without a cluster, registered through the ``pytest11`` entry point.

This module is imported by every pytest run of everyone who installs the provider, so it imports
nothing but pytest at load time; the emulator is imported when a fixture is first used.

Fixtures:

``kubernetes_emulator``
    A running ``KubernetesEmulator`` with the demo cluster (two spot 8x H100 nodes, an on-demand
    4x L4 node, a CPU node) and ``.kubeconfig_path``. Each test gets a fresh cluster; every process
    it started is stopped when the test ends, passed or failed. A Job's failed pod is replaced
    after 1 s, 2 s, 4 s... here (10 s, 20 s, 40 s... on a cluster).
``kubernetes_scale_emulator``
    A factory: ``kubernetes_scale_emulator(nodes=1000)`` starts an emulator with the scale cluster
    (``airflow_gpu.testing.kubernetes.scale``: H100, A100, L4 and CPU node groups, spot and
    on-demand) and returns it, with ``.kubeconfig_path``; pods with ``simulated.local/...`` images
    run no process, so a test can hold thousands. Every emulator it started stops when the test ends.
``kubernetes_default_connection``
    The emulator, with Airflow's ``kubernetes_default`` connection pointed at it for the test.
``batch_emulator``
    A running ``BatchEmulator``: queues ``gpu-spot`` and ``gpu-on-demand`` over spot and on-demand
    compute environments with g5, g6, p4d and p5 instance types; jobs run as local processes and
    are killed when the test ends. SIGTERM-to-SIGKILL is 5 s here (30 s on AWS).
``aws_default_connection``
    The Batch emulator, with Airflow's ``aws_default`` connection pointed at it for the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow_gpu.testing.batch.emulator import BatchEmulator
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator


@pytest.fixture
def kubernetes_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubernetesEmulator]:
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

    emulator = KubernetesEmulator("demo", job_backoff_seconds=1)
    emulator.start()
    try:
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def kubernetes_scale_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., KubernetesEmulator]]:
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
    from airflow_gpu.testing.kubernetes.scale import scale_cluster

    started: list[KubernetesEmulator] = []

    def start(nodes: int = 1000) -> KubernetesEmulator:
        emulator = KubernetesEmulator(scale_cluster(nodes), job_backoff_seconds=1)
        started.append(emulator.start())
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        return emulator

    try:
        yield start
    finally:
        for emulator in started:
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


@pytest.fixture
def batch_emulator() -> Iterator[BatchEmulator]:
    from airflow_gpu.testing.batch.emulator import BatchEmulator

    with BatchEmulator(stop_timeout=5) as emulator:
        yield emulator


@pytest.fixture
def aws_default_connection(batch_emulator: BatchEmulator, monkeypatch: pytest.MonkeyPatch) -> BatchEmulator:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", batch_emulator.airflow_connection_uri())
    return batch_emulator

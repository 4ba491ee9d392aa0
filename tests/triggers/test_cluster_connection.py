"""``ClusterConnection`` reads a Kubernetes connection once, in the event loop, for every hook of the
triggerer process: against the Kubernetes emulator, with the connection in the environment as a
deployment's secrets backend gives it. The counters wrap Airflow's own ``BaseHook`` readers."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.triggers import cluster
from airflow_gpu.triggers.cluster import ClusterConnection

pytestmark = pytest.mark.slow  # imports cncf-kubernetes' async hook (seconds of CPU)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, kubernetes_emulator: KubernetesEmulator) -> list[tuple[str, str]]:
    """Every connection read as (how, thread name)."""
    from airflow.sdk import BaseHook

    monkeypatch.setattr(cluster, "_EXTRAS", {})
    extra = {"kube_config_path": str(kubernetes_emulator.kubeconfig_path)}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_PREFETCH", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    seen: list[tuple[str, str]] = []
    sync_read, async_read = BaseHook.get_connection.__func__, BaseHook.aget_connection.__func__  # type: ignore[attr-defined]

    def get_connection(cls: Any, conn_id: str) -> Any:
        seen.append(("get_connection", threading.current_thread().name))
        return sync_read(cls, conn_id)

    async def aget_connection(cls: Any, conn_id: str) -> Any:
        seen.append(("aget_connection", threading.current_thread().name))
        return await async_read(cls, conn_id)

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(get_connection))
    monkeypatch.setattr(BaseHook, "aget_connection", classmethod(aget_connection))
    return seen


def test_the_connection_is_read_once_in_the_loop_and_no_hook_reads_it_again(reads: list[tuple[str, str]]) -> None:
    connection = ClusterConnection(kubernetes_conn_id="k8s_prefetch")

    async def three_calls() -> list[int]:
        counts = []
        for _ in range(3):
            found = await cluster.list_objects(connection, "pods", "default", "app=none")
            counts.append(len(found))
        hook = connection.hook()  # the official trigger's hook (on_kill, cleanup) reads nothing either
        async with hook.get_conn() as api_client:
            from kubernetes_asyncio.client import CoreV1Api

            await CoreV1Api(api_client).list_namespaced_pod("default")
        return counts

    assert asyncio.run(three_calls()) == [0, 0, 0]
    assert reads == [("aget_connection", threading.main_thread().name)]


def test_an_edited_connection_reaches_the_hooks_after_the_ttl(
    reads: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = ClusterConnection(kubernetes_conn_id="k8s_prefetch")
    asyncio.run(connection.prefetch())
    asyncio.run(connection.prefetch())
    assert len(reads) == 1
    monkeypatch.setattr(cluster, "EXTRAS_TTL", 0.0)
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_PREFETCH", json.dumps({"conn_type": "kubernetes", "extra": {"in_cluster": False}})
    )
    asyncio.run(connection.prefetch())
    assert len(reads) == 2 and connection.hook()._extras == {"in_cluster": False}


def test_a_missing_default_connection_is_an_empty_one_and_another_is_an_error(reads: list[tuple[str, str]]) -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    default = ClusterConnection(kubernetes_conn_id="kubernetes_default")
    asyncio.run(default.prefetch())
    assert default.hook()._extras == {}
    with pytest.raises(AirflowNotFoundException):
        asyncio.run(ClusterConnection(kubernetes_conn_id="no_such_connection").prefetch())
    given = ClusterConnection(kubernetes_conn_id="k8s_prefetch", connection_extras={"in_cluster": False})
    asyncio.run(given.prefetch())  # extras the operator passed: nothing to read
    assert [how for how, _ in reads] == ["aget_connection", "aget_connection"]

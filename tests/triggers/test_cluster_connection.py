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


def read_in_turn(monkeypatch: pytest.MonkeyPatch, *answers: Any) -> list[str]:
    """``BaseHook.aget_connection`` answering ``answers`` in turn (a Connection, or an error to raise),
    with every read due again at once (``EXTRAS_TTL`` 0); the conn ids asked for."""
    from airflow.sdk import BaseHook

    monkeypatch.setattr(cluster, "_EXTRAS", {})
    monkeypatch.setattr(cluster, "EXTRAS_TTL", 0.0)
    queue, asked = list(answers), []

    async def aget_connection(cls: Any, conn_id: str) -> Any:
        asked.append(conn_id)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(BaseHook, "aget_connection", classmethod(aget_connection))
    return asked


@pytest.mark.parametrize("conn_id", ["kubernetes_default", "k8s_gpu"])
def test_a_failed_re_read_keeps_the_extras_read_before(monkeypatch: pytest.MonkeyPatch, conn_id: str) -> None:
    """The supervisor answers a transient error (a database hiccup) as "not found": Airflow's
    ``ExecutionAPISecretsBackend`` returns None on any error response and ``aget_connection`` then
    raises ``AirflowNotFoundException``. The hooks keep the extras of the last good read: not the
    default connection's empty extras (``~/.kube/config``, another cluster), nor an error that
    fails Mark Failed's delete."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    extra = {"kube_config_path": "/etc/gpu/kubeconfig", "namespace": "gpu"}
    good = Connection(conn_id=conn_id, conn_type="kubernetes", extra=json.dumps(extra))
    missing = AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
    asked = read_in_turn(monkeypatch, good, missing, RuntimeError("Response read out of order"), missing)
    connection = ClusterConnection(kubernetes_conn_id=conn_id)
    for _ in range(4):
        asyncio.run(connection.prefetch())
        assert connection.hook()._extras == extra
    assert asked == [conn_id] * 4  # each read was made: a good one after the hiccup would be taken


def test_a_missing_default_connection_read_first_is_an_empty_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    edited = Connection(conn_id="kubernetes_default", conn_type="kubernetes", extra='{"in_cluster": true}')
    read_in_turn(monkeypatch, AirflowNotFoundException("kubernetes_default"), edited)
    connection = ClusterConnection(kubernetes_conn_id="kubernetes_default")
    asyncio.run(connection.prefetch())
    assert connection.hook()._extras == {}
    asyncio.run(connection.prefetch())  # created meanwhile: it reaches the hooks
    assert connection.hook()._extras == {"in_cluster": True}


def test_secrets_nested_in_the_extras_are_masked_as_extra_dejson_masks_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read masks the extra as one string; a token inside a ``kube_config`` extra must be masked
    on its own too, or a hook's log line that prints the user's config shows it."""
    from airflow.sdk import Connection
    from airflow.sdk._shared.secrets_masker import redact

    token = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImdwdS10b2tlbi0xIn0"
    kube_config = {"users": [{"name": "gpu", "user": {"token": token}}], "current-context": "gpu"}
    extra = json.dumps({"kube_config": kube_config, "namespace": "gpu"})
    read_in_turn(monkeypatch, Connection(conn_id="k8s_masked", conn_type="kubernetes", extra=extra))
    assert token in redact(f"user token {token}")  # not masked by anything yet
    asyncio.run(ClusterConnection(kubernetes_conn_id="k8s_masked").prefetch())
    assert redact(f"user token {token}") == "user token ***"


def test_an_extra_that_is_not_json_is_no_extras_with_a_clear_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As ``extra_dejson`` reads it, for the hook: no extras, and the log says which connection."""
    from airflow.sdk import Connection

    broken = Connection(conn_id="k8s_broken", conn_type="kubernetes", extra='{"namespace": "gpu",')
    read_in_turn(monkeypatch, broken, broken)
    connection = ClusterConnection(kubernetes_conn_id="k8s_broken")
    with caplog.at_level("ERROR", logger=cluster.LOG.name):
        asyncio.run(connection.prefetch())
        asyncio.run(connection.prefetch())
    assert connection.hook()._extras == {}
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "Connection k8s_broken: its extra is not valid JSON"
    ] * 2


def test_a_triggerer_without_get_on_nodes_says_so_once_at_error(
    reads: list[tuple[str, str]], kubernetes_emulator: KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """RBAC without ``get nodes`` (every node read answered 403, as the API server does): the node's
    fate is not known (None, never "gone"), and the triggerer's log says what that costs once."""
    from airflow_gpu.spot import node_access

    node_access._said.clear()
    kubernetes_emulator.inject_api_fault(verb="get", resource="nodes", status=403, times=None)
    connection = ClusterConnection(kubernetes_conn_id="k8s_prefetch")
    node = "gpu-node-0"  # RBAC answers before the node is looked up, as on a real API server

    async def twice() -> list[bool | None]:
        return [await cluster.node_stays(connection, node), await cluster.node_stays(connection, node)]

    assert asyncio.run(twice()) == [None, None]
    said = [r for r in caplog.records if "cannot read node" in r.getMessage()]
    assert [r.levelname for r in said if r.levelname != "DEBUG"] == ["ERROR"]
    assert "`get` on `nodes`" in said[0].getMessage()

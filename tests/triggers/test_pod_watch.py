"""``SharedPodWatch`` in an event loop of this process against the Kubernetes emulator's HTTP API,
through cncf-kubernetes' ``AsyncKubernetesHook`` and ``kubernetes_asyncio`` (no fakes), with the
API faults a real API server produces: cut streams, 410 Expired, 403 on watch, 429."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.triggers.pod_watch import WATCH_LABEL, ClusterConnection, PodState, SharedPodWatch

pytestmark = pytest.mark.slow  # imports cncf-kubernetes' async hook (seconds of CPU)


def connection(emulator: KubernetesEmulator) -> ClusterConnection:
    return ClusterConnection(config_dict=yaml.safe_load(emulator.kubeconfig()))


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def gpu_pod(api: client.CoreV1Api, name: str, script: str) -> None:
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    api.create_namespaced_pod(
        "default",
        {"metadata": {"name": name, "labels": {WATCH_LABEL: "l4"}},
         "spec": {"restartPolicy": "Never", "containers": [container]}},
    )  # fmt: skip


async def until_final(watch: SharedPodWatch, name: str, timeout: float = 30) -> PodState:
    """The pod's states until it ends (phase Succeeded/Failed) or is deleted."""
    seen = 0

    async def follow() -> PodState:
        nonlocal seen
        while True:
            state = await watch.next_state(name, seen)
            seen = state.version
            phase = ((state.pod or {}).get("status") or {}).get("phase")
            if state.deleted or phase in ("Succeeded", "Failed"):
                return state

    return await asyncio.wait_for(follow(), timeout)


def run(body: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(body())


def test_one_list_and_one_watch_serve_every_pod_of_the_namespace(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    names = [f"shard-{i}" for i in range(6)]
    for name in names:
        gpu_pod(api, name, "sleep 600")
    api.create_namespaced_pod("default", {"metadata": {"name": "not-ours"},
        "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["true"]}]}})  # fmt: skip

    def end_them() -> None:
        for name in names[:3]:
            kubernetes_emulator.preempt(name, grace_period_seconds=0)
        for name in names[3:]:
            api.delete_namespaced_pod(name, "default", grace_period_seconds=0)

    async def body() -> list[PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        waiting = [asyncio.create_task(until_final(watch, n)) for n in names]
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(end_them)  # while watched
        return list(await asyncio.gather(*waiting))

    states = run(body)
    assert not any(s.deleted for s in states[:3])
    # A deleted pod: gone, or first ended Failed by the kubelet with its deletionTimestamp set.
    assert all(s.deleted or (s.pod and s.pod["metadata"].get("deletionTimestamp")) for s in states[3:])
    assert all(s.pod is not None and s.pod["metadata"]["name"] == n for s, n in zip(states, names, strict=True))
    assert [s.pod["status"]["phase"] for s in states[:3] if s.pod] == ["Failed"] * 3
    assert kubernetes_emulator.api_requests("LIST", "pods") == 1
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0
    assert not SharedPodWatch._loops  # ended with its event loop


def test_no_final_state_is_missed_across_cut_streams_expired_versions_and_a_restart(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="watch", resource="pods", cut_after=1, times=2)

    async def body() -> tuple[PodState, PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        await asyncio.to_thread(gpu_pod, api, "first", "sleep 1; exit 0")
        first = await until_final(watch, "first")  # through cut streams
        await asyncio.to_thread(gpu_pod, api, "second", "sleep 1; exit 4")
        # The history goes (compaction) and the API server restarts: the next watch gets 410.
        await asyncio.to_thread(kubernetes_emulator.compact_history)
        await asyncio.to_thread(kubernetes_emulator.end_watches)
        return first, await until_final(watch, "second")

    first, second = run(body)
    assert first.pod is not None and first.pod["status"]["phase"] == "Succeeded"
    assert second.pod is not None and second.pod["status"]["phase"] == "Failed"
    assert kubernetes_emulator.api_faults_injected  # a stream was cut, and ridden out
    assert kubernetes_emulator.api_requests("LIST", "pods") >= 2  # listed again after 410


def test_without_watch_permission_it_says_so_once_and_lists_the_namespace(
    kubernetes_emulator: KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="watch", resource="pods", status=403, times=None)
    for name in ("a", "b", "c"):
        gpu_pod(api, name, "sleep 1")

    async def body() -> list[PodState]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default", poll_interval=0.2)
        return list(await asyncio.gather(*(until_final(watch, n) for n in ("a", "b", "c"))))

    with caplog.at_level(logging.WARNING, logger="airflow_gpu.triggers.pod_watch"):
        states = run(body)
    assert all(s.pod and s.pod["status"]["phase"] == "Succeeded" for s in states)
    warnings = [r.getMessage() for r in caplog.records if "does not grant `watch pods`" in r.getMessage()]
    assert len(warnings) == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0  # one LIST per interval, never a GET per pod
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1


def test_a_pod_deleted_before_anyone_watched_is_reported_gone_and_throttling_is_waited_out(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    api = core(kubernetes_emulator)
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=429, retry_after=1, times=1)

    async def body() -> PodState:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        return await until_final(watch, "never-existed")

    state = run(body)
    assert state.deleted and state.pod is None
    assert kubernetes_emulator.api_requests("LIST", "pods") == 2  # the 429, then the list
    assert kubernetes_emulator.api_requests("GET", "pods") == 1  # the one look-up
    del api


def test_the_operators_kubeconfig_replaces_the_connections_file_as_the_sync_hook_does(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """KPO with ``config_file`` and a connection naming ``kube_config_path``: the worker's sync hook
    uses the file; ``AsyncKubernetesHook`` would refuse both as mutually exclusive."""
    both = ClusterConnection(
        kubernetes_conn_id="kubernetes_default",
        connection_extras={"kube_config_path": "/nonexistent/config", "namespace": "default"},
        config_dict=yaml.safe_load(kubernetes_emulator.kubeconfig()),
    )

    async def body() -> int:
        async with both.hook().get_conn() as api:
            from kubernetes_asyncio.client import CoreV1Api

            return len((await CoreV1Api(api).list_node()).items)

    assert asyncio.run(body()) == 4


def test_a_group_hears_of_every_pod_with_its_label_made_before_or_after_it_was_held(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """The pods of a training Job: their names are the Job controller's, so a trigger holds their label."""
    api = core(kubernetes_emulator)

    def labelled(name: str, script: str, group: str) -> None:
        container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
        api.create_namespaced_pod("default", {
            "metadata": {"name": name, "labels": {WATCH_LABEL: "l4", "airflow-gpu/training-job": group}},
            "spec": {"restartPolicy": "Never", "containers": [container]}})  # fmt: skip

    labelled("before", "sleep 600", "job-a")
    labelled("stranger", "sleep 600", "job-b")

    async def body() -> tuple[dict[str, PodState], list[str]]:
        watch = SharedPodWatch.get(connection(kubernetes_emulator), "default")
        watch.hold_group("airflow-gpu/training-job", "job-a")
        await asyncio.wait_for(watch.synced.wait(), 30)
        version, members = await watch.next_group("airflow-gpu/training-job", "job-a")
        assert set(members) == {"before"}
        await asyncio.to_thread(labelled, "after", "sleep 1", "job-a")
        await asyncio.to_thread(api.delete_namespaced_pod, "before", "default", grace_period_seconds=0)
        while not (members.get("before") and members["before"].deleted and "after" in members
                   and (members["after"].pod or {}).get("status", {}).get("phase") == "Succeeded"):  # fmt: skip
            version, members = await asyncio.wait_for(
                watch.next_group("airflow-gpu/training-job", "job-a", version), 30
            )
        watch.release_group("airflow-gpu/training-job", "job-a")
        return members, sorted(watch.states)

    members, kept = run(body)
    assert set(members) == {"before", "after"} and members["before"].pod is not None  # gone, with its last state
    assert kept == []  # released: nothing kept for a group nobody holds
    assert kubernetes_emulator.api_requests("GET", "pods") == 0

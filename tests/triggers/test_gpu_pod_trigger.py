"""``GPUPodTrigger`` in an event loop of this process against the Kubernetes emulator, as the
triggerer runs it: the official trigger's events, from one shared watch (no fakes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.triggers.kubernetes import LAST_SEEN_KEY, GPUPodTrigger
from airflow_gpu.triggers.pod_watch import WATCH_LABEL, SharedPodWatch

pytestmark = pytest.mark.slow  # imports cncf-kubernetes' triggers and async hook (seconds of CPU)


def trigger(emulator: KubernetesEmulator, name: str, **options: Any) -> GPUPodTrigger:
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    official = KubernetesPodTrigger(
        pod_name=name,
        pod_namespace="default",
        trigger_start_time=None,  # type: ignore[arg-type]
        kubernetes_conn_id=None,
        config_dict=yaml.safe_load(emulator.kubeconfig()),
        poll_interval=2,
        get_logs=True,
        base_container_name="base",
        **options,
    )
    return GPUPodTrigger.from_official(official)


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def gpu_pod(api: client.CoreV1Api, name: str, script: str, **spec: Any) -> None:
    container = {"name": "base", "image": "busybox", "command": ["sh", "-c", script]}
    api.create_namespaced_pod(
        "default",
        {"metadata": {"name": name, "labels": {WATCH_LABEL: "l4"}},
         "spec": {"restartPolicy": "Never", "containers": [container], **spec}},
    )  # fmt: skip


async def first_event(t: GPUPodTrigger) -> dict[str, Any]:
    async for event in t.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def test_events_are_the_official_triggers_from_one_list_and_one_watch(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    gpu_pod(api, "ok", "sleep 1")
    gpu_pod(api, "bug", "sleep 1; exit 3")
    gpu_pod(api, "reclaimed", "sleep 60")
    gpu_pod(api, "removed", "sleep 60")
    gpu_pod(api, "stuck", "true", nodeSelector={"no-such": "node"})

    async def body() -> list[dict[str, Any]]:
        runs = [
            asyncio.create_task(first_event(trigger(kubernetes_emulator, name, schedule_timeout=3)))
            for name in ("ok", "bug", "reclaimed", "removed", "stuck")
        ]
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        await asyncio.to_thread(kubernetes_emulator.preempt, "reclaimed", "default", 0)
        await asyncio.to_thread(api.delete_namespaced_pod, "removed", "default", grace_period_seconds=0)
        return list(await asyncio.gather(*runs))

    ok, bug, reclaimed, removed, stuck = asyncio.run(body())
    assert (ok["status"], ok["name"], ok["namespace"]) == ("success", "ok", "default")
    assert bug["status"] == "failed" and bug["message"] in ("pod failed", "Container state failed")  # as the official
    assert bug[LAST_SEEN_KEY]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    # The kubelet ends a deleted pod Failed before it goes; each event carries the last state seen.
    conditions = {c["type"]: c for c in reclaimed[LAST_SEEN_KEY]["status"]["conditions"]}
    assert reclaimed["status"] == "failed" and conditions["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    assert removed["status"] == "failed" and removed[LAST_SEEN_KEY]["metadata"]["deletionTimestamp"]
    assert LAST_SEEN_KEY not in ok
    assert stuck["status"] == "timeout" and "too long to be scheduled" in stuck["message"]
    assert kubernetes_emulator.api_requests("LIST", "pods") == 1
    assert kubernetes_emulator.api_requests("WATCH", "pods") == 1
    assert kubernetes_emulator.api_requests("GET", "pods") == 0  # the official trigger GETs each pod every poll


def test_it_serializes_as_itself_and_mark_failed_deletes_the_pod(kubernetes_emulator: KubernetesEmulator) -> None:
    api = core(kubernetes_emulator)
    gpu_pod(api, "marked", "sleep 60")
    t = trigger(kubernetes_emulator, "marked", termination_grace_period=0)
    path, kwargs = t.serialize()
    assert path == "airflow_gpu.triggers.kubernetes.GPUPodTrigger"
    assert kwargs["pod_name"] == "marked" and GPUPodTrigger(**kwargs).serialize() == (path, kwargs)

    async def body() -> None:
        waiting = asyncio.create_task(first_event(t))
        await asyncio.sleep(1)
        waiting.cancel()
        await t.on_kill()  # what the triggerer of Airflow 3.3+ calls on Mark Failed

    asyncio.run(body())
    from airflow_gpu.testing.polling import wait_for

    wait_for(lambda: not [p for p in api.list_namespaced_pod("default").items if p.metadata.name == "marked"], 30)

"""``GPUPodTrigger`` and its cluster calls under a throttled, restarting or dropping API server (issue 25,
behaviour 3): every call but the shared watch's (which backs off on its own) is asked again on 429 (with
``Retry-After``), 5xx and a reset; a create whose response was lost is adopted, never made twice."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import yaml

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers import cluster
from airflow_gpu.triggers.cluster import ClusterConnection
from airflow_gpu.triggers.kubernetes import GPUPodTrigger
from airflow_gpu.triggers.pod_watch import SharedPodWatch
from tests.triggers.test_gpu_pod_trigger import core, first_event, first_pod, spot_argument, trigger

# slow: imports cncf-kubernetes' triggers and async hook (seconds of CPU)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]


def connection(emulator: KubernetesEmulator) -> ClusterConnection:
    return ClusterConnection(config_dict=yaml.safe_load(emulator.kubeconfig()))


def test_a_node_read_rides_out_a_reset_and_5xx_rather_than_calling_its_fate_unknown(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A node that cannot be read weighs as a reclaim (``classify_deleted_pod``): a reset used to crash the
    trigger, a 503 made the node's fate unknown. A 403 (no ``get nodes``) is not asked again."""
    kubernetes_emulator.inject_api_fault(verb="get", resource="nodes", status=0, times=1)
    kubernetes_emulator.inject_api_fault(verb="get", resource="nodes", status=503, times=1)
    kubernetes_emulator.inject_api_fault(verb="get", resource="nodes", status=429, retry_after=0.2, times=1)
    assert asyncio.run(cluster.node_stays(connection(kubernetes_emulator), "gpu-on-demand-1")) is True
    assert kubernetes_emulator.api_requests("GET", "nodes") == 4
    kubernetes_emulator.inject_api_fault(verb="get", resource="nodes", status=403, times=None)
    assert asyncio.run(cluster.node_stays(connection(kubernetes_emulator), "gpu-on-demand-1")) is None
    assert kubernetes_emulator.api_requests("GET", "nodes") == 5


def test_a_listing_that_is_throttled_is_asked_again(
    kubernetes_emulator: KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted trigger lists its try's pods to find where it stands; a 429 there used to end the search.
    The pause before asking again is the 429's ``Retry-After`` (0.2 s here), not the backoff's own."""
    api = core(kubernetes_emulator)
    plan = spot_argument("listed")
    first_pod(api, plan, "listed", "sleep 600")
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=429, retry_after=0.2, times=1)
    kubernetes_emulator.inject_api_fault(verb="list", resource="pods", status=500, times=1)
    with caplog.at_level(logging.WARNING):
        found = asyncio.run(cluster.list_objects(connection(kubernetes_emulator), "pods", "default", "task_id=t"))
    assert [p["metadata"]["name"] for p in found] == ["listed"]
    pauses = [m for m in caplog.messages if "asking again" in m]
    assert len(pauses) == 2 and "(429); asking again in 0.2 s" in pauses[0], pauses


def test_a_replacement_rides_out_throttling_5xx_and_a_lost_create_response(
    kubernetes_emulator: KubernetesEmulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reclaimed pod's log, its delete and the next pod's create meet 429 with ``Retry-After``, 503 and a
    reset after the create was served: the run goes on with one replacement, the reclaimed pod's output in the
    task's log."""
    api = core(kubernetes_emulator)
    plan = spot_argument("train-x", max_interruptions=3)
    first_pod(api, plan, "train-x", "echo checkpoint-at-step-7; sleep 600")
    t = GPUPodTrigger(**{**trigger(kubernetes_emulator, "train-x").serialize()[1], "gpu_spot": plan})

    async def body() -> dict[str, Any]:
        running = asyncio.create_task(first_event(t))
        await asyncio.sleep(0)
        (watch,) = SharedPodWatch.in_this_loop()
        await asyncio.wait_for(watch.synced.wait(), 30)
        for rule in (
            {"verb": "get", "resource": "pods/log", "status": 503, "times": 2},
            {"verb": "delete", "resource": "pods", "status": 429, "retry_after": 0.2, "times": 1},
            {"verb": "delete", "resource": "pods", "status": 0, "times": 1},
            {"verb": "create", "resource": "pods", "status": 429, "retry_after": 0.2, "times": 1},
            {"verb": "create", "resource": "pods", "status": 0, "served": True, "times": 1},
        ):
            kubernetes_emulator.inject_api_fault(**rule)
        # Reclaimed once its line is out: a pod can be Running before its shell has echoed.
        await asyncio.to_thread(wait_for, lambda: "train-x" in kubernetes_emulator.printed("checkpoint-at-step-7"),
                                30, "the pod's checkpoint line")  # fmt: skip
        await asyncio.to_thread(kubernetes_emulator.preempt, "train-x", "default", 0)
        return await asyncio.wait_for(running, 120)

    event = asyncio.run(body())
    printed = capsys.readouterr()
    assert (event["status"], event["name"]) == ("success", "train-x-r1")
    assert event["gpu_state"]["submissions"] == 1 and len(event["gpu_state"]["interruptions"]) == 1
    assert {p["name"] for p in kubernetes_emulator.pod_phase_times("default")} == {"train-x", "train-x-r1"}
    assert "[base] checkpoint-at-step-7" in printed.out + printed.err  # the log read was asked again, not given up
    assert len(kubernetes_emulator.api_faults_injected) == 6

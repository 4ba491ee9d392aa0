"""The example fan-out DAG (dags/gpu_fanout.py) through ``airflow dags test`` against the emulator:
5 mapped GPU shards through the ``kubernetes_default`` connection, one preempted, reduced."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

pytestmark = pytest.mark.slow
DAGS = Path(__file__).resolve().parents[2] / "dags"


def expected_total(shards: int, rows: int) -> int:
    """What dags/gpu_fanout.py's SCORE_SHARD computes, summed over the shards."""
    return sum(
        int(hashlib.sha256(f"{shard}:{row}".encode()).hexdigest()[:4], 16) % 7
        for shard in range(shards)
        for row in range(rows)
    )


def test_fanout_over_five_shards_with_a_preemption(
    airflow: Callable[..., CompletedProcess[str]], kubernetes_emulator: KubernetesEmulator
) -> None:
    api = client.CoreV1Api(config.new_client_from_config(str(kubernetes_emulator.kubeconfig_path)))
    preempted: list[str] = []

    def preempt_one() -> None:
        deadline = time.monotonic() + 120
        while not preempted and time.monotonic() < deadline:
            for pod in api.list_namespaced_pod("default", label_selector="task_id=score_shard").items:
                if pod.status.phase == "Running":
                    preempted.append(pod.metadata.name)
                    kubernetes_emulator.preempt(pod.metadata.name)
                    return
            time.sleep(0.05)

    injector = threading.Thread(target=preempt_one, daemon=True)
    injector.start()
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubernetes_emulator.kubeconfig_path)}}
    completed = airflow(
        "dags", "test", "gpu_fanout",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS), AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(connection),
    )  # fmt: skip
    injector.join(timeout=5)
    assert completed.returncode == 0, completed.stdout[-5000:]
    assert "5 of 5 shards succeeded (100%)" in completed.stdout
    # every shard's result reached the reduce step through XCom
    assert f"total score {expected_total(5, 2000)} over 10000 rows" in completed.stdout
    assert len(preempted) == 1
    assert "GPU interruption 1: preempted (TerminationByKubelet)" in completed.stdout
    pods = api.list_namespaced_pod("default", label_selector="task_id=score_shard").items
    assert {p.metadata.labels["map_index"] for p in pods} <= {"0", "1", "2", "3", "4"}
    assert all(p.spec.node_name in {"gpu-spot-1", "gpu-spot-2"} for p in pods)  # H100 on spot

"""``airflow-gpu reap`` as a platform team runs it: Airflow silent means nothing is deleted."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client, config

from airflow_gpu import cli
from airflow_gpu.reap import airflow_api
from airflow_gpu.reap.airflow_api import AirflowUnreachable
from airflow_gpu.reap.reaper import reap
from airflow_gpu.reap.resources import Skipped
from airflow_gpu.reap.rules import InstanceState, Resource, TaskTry
from airflow_gpu.testing.airflow_stack import free_port
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.operators.task_context import Ti
from tests.reap.conftest import RUN, RecordedAirflow, pod_marks


def test_an_unreachable_airflow_deletes_nothing_and_says_so_in_one_line(
    kubernetes_emulator: KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
    marks = pod_marks(Ti(1, dag_id="gpu", task_id="failed", run_id=RUN))
    core.create_namespaced_pod("default", {
        "metadata": {"name": "would-be-orphan", **marks},
        "spec": {"containers": [{"name": "base", "image": "busybox", "command": ["sleep", "600"]}]},
    })  # fmt: skip
    monkeypatch.setattr(airflow_api, "FIRST_PAUSE", 0.01)
    monkeypatch.setenv("AIRFLOW_GPU_AIRFLOW_TOKEN", "a-token")
    capsys.readouterr()  # what building the marks logged
    code = cli.main([
        "reap", "--delete", "--grace", "0s", "--backend", "kubernetes",
        "--airflow-url", f"http://127.0.0.1:{free_port()}", "--kubeconfig", str(kubernetes_emulator.kubeconfig_path),
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "not reachable" in err and err.rstrip().endswith("nothing was deleted")
    assert core.read_namespaced_pod("would-be-orphan", "default").metadata.deletion_timestamp is None


class Recorded:
    """A backend at the reaper's own boundary: two orphans listed, deletions recorded."""

    backend = "kubernetes"

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def find(self) -> tuple[list[Resource], list[Skipped]]:
        made = datetime.now(timezone.utc) - timedelta(hours=1)
        tasks = [TaskTry("gpu", f"t{i}", RUN, -1, 1) for i in range(2)]
        return [Resource("kubernetes", "pod", t.task_id, "default", t, made, "Running", True) for t in tasks], []

    def delete(self, resource: Resource) -> str:
        self.deleted.append(resource.name)
        return "deleted"


def test_airflow_lost_half_way_deletes_nothing() -> None:
    backend = Recorded()
    failed = InstanceState("failed", 1)
    airflow = RecordedAirflow({("gpu", "t0", RUN, -1): failed, ("gpu", "t1", RUN, -1): failed}, unreachable_after=1)
    with pytest.raises(AirflowUnreachable):
        reap([backend], airflow, delete=True)
    assert backend.deleted == []
    assert [f.resource.name for f in reap([backend], RecordedAirflow(airflow.states), delete=True).orphans] == [
        "t0",
        "t1",
    ]


def test_reap_needs_airflow_and_reads_durations(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_GPU_AIRFLOW_URL", raising=False)
    assert cli.main(["reap"]) == 2
    assert "--airflow-url" in capsys.readouterr().err
    assert [cli._duration(v) for v in ("90s", "10m", "1h", "5")] == [90, 600, 3600, 300]
    assert cli.main(["reap", "--grace", "soon", "--airflow-url", "http://x"]) == 2

"""bench/mapped_fanout.py: its DAG file parses for any shard count, and its duplicate check can fail.

The bench itself (a real Airflow, minutes) is not run here; what decides its figures is: the DAGs,
the preemption plan, and the check that no shard ever had two live pods.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from airflow_gpu.testing.polling import wait_for

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    import mapped_fanout

    yield mapped_fanout
    sys.modules.pop("mapped_fanout", None)


def test_the_dag_file_parses_with_any_shard_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("MAPPED_FANOUT_SHARDS", "5")
    monkeypatch.setenv("MAPPED_FANOUT_RETRY_DELAY", "3")
    shutil.copy(BENCH / "mapped_fanout_dags.py", tmp_path)
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"mapped_fanout_ours", "mapped_fanout_baseline", "mapped_fanout_baseline_sync"}
    for dag in bag.dags.values():
        shard = dag.get_task("shard")
        environments: Any = shard.expand_input.value["env_vars"]
        assert [e["SIMULATED_OUTPUT"].splitlines()[0] for e in environments] == [
            f"shard {i} starting" for i in range(5)
        ]
        assert shard.partial_kwargs["retries"] == 2
        assert shard.partial_kwargs["retry_delay"].total_seconds() == 3
    assert bag.dags["mapped_fanout_baseline_sync"].get_task("shard").partial_kwargs["deferrable"] is False


def test_the_preemption_plan_is_seeded_and_the_same_for_every_side(bench: ModuleType) -> None:
    plan = bench.preemption_plan(200, 0.1, 45, seed=24)
    assert len(plan) == 20 and plan == bench.preemption_plan(200, 0.1, 45, seed=24)
    assert plan != bench.preemption_plan(200, 0.1, 45, seed=25)
    assert all(0 <= shard < 200 and 9 <= delay <= 27 for shard, delay in plan.items())


def test_overlaps_are_two_live_pods_of_one_shard(bench: ModuleType) -> None:
    life = bench.PodLife
    pods = [
        life("a", 0, "1", created=0.0, ended=10.0),
        life("a-r1", 0, "1", created=10.0, ended=20.0),  # created as the first ended: no overlap
        life("b", 1, "1", created=0.0, deleted=5.0),
        life("b-2", 1, "2", created=4.0, ended=9.0),  # one second with two live pods
        life("c", 2, "1", created=0.0),  # never ended
        life("c-2", 2, "2", created=30.0, ended=40.0),
        life("other", None, None, created=0.0),  # not a shard's pod
    ]
    assert bench.overlaps(pods) == {1: 1.0, 2: 10.0}
    assert life("x", 0, "1", created=0.0).live_until == math.inf


def test_the_recorder_sees_a_duplicate_and_preempts_once(bench: ModuleType) -> None:
    """Against the emulator: two live pods of one shard are found; a planned shard is preempted once."""
    from kubernetes import client

    with bench.KubernetesEmulator(bench.cluster(4)) as emulator:
        recorder = bench.PodRecorder(emulator, {0: 0.2})
        api = client.CoreV1Api(client.ApiClient(client.Configuration(host=emulator.url)))

        def pod(name: str, shard: int) -> dict[str, Any]:
            container = {
                "name": "base",
                "image": "simulated.local/x",
                "env": [{"name": "SIMULATED_SECONDS", "value": "30"}],
            }
            spec = {"restartPolicy": "Never", "containers": [container], "tolerations": [{"operator": "Exists"}]}
            return {"metadata": {"name": name, "labels": {"map_index": str(shard), "try_number": "1"}}, "spec": spec}

        for name, shard in (("shard-0", 0), ("shard-1", 1), ("shard-1-twin", 1)):
            api.create_namespaced_pod("default", pod(name, shard))
        wait_for(lambda: len(recorder.preemptions) == 1, 30, "the planned preemption")
        wait_for(lambda: api.read_namespaced_pod("shard-0", "default").status.phase == "Failed", 30, "shard-0 Failed")
        api.create_namespaced_pod("default", pod("shard-0-r1", 0))
        wait_for(lambda: len([p for p in recorder.lives() if p.running]) == 4, 30, "every pod Running")
    [preemption] = recorder.preemptions
    assert (preemption.shard, preemption.pod, preemption.skipped) == (0, "shard-0", "")
    assert set(bench.overlaps(recorder.lives())) == {1}  # shard 0's replacement came after its pod ended
    assert len(recorder.recoveries()) == 1

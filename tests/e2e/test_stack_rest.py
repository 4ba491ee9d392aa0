"""The example DAGs on a real Airflow stack, driven through REST API v2 exactly as the UI does
(token, unpause, POST dagRuns with conf), with one spot preemption injected while it runs: each a
scenario on the stack's own emulators (``shared``), launched with the others, with the injector
``make demo`` uses.

The fan-out test covers what tests/e2e/test_gpu_fanout.py checked through ``airflow dags test``
before it was merged here: every shard's result through XCom into the reduce step, one
preemption absorbed and reported, and every shard pod on the H100 spot nodes."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.testing.demo import BATCH_DAG_ID, DAG_ID, inject_preemption, inject_reclaim, report, report_batch
from tests.e2e.scenarios import Injector, Scenario, ScenarioRun, render, scenarios

pytestmark = pytest.mark.slow


def expected_total(shards: int, rows: int) -> int:
    """What dags/gpu_fanout.py's SCORE_SHARD computes, summed over the shards."""
    return sum(
        int(hashlib.sha256(f"{shard}:{row}".encode()).hexdigest()[:4], 16) % 7
        for shard in range(shards)
        for row in range(rows)
    )


class DemoInjector(Injector):
    """``make demo``'s fault for the DAG (a spot reclaim of one shard's node, or of the training
    job's host), and the line the demo prints about it."""

    def __init__(self, inject: Callable[[Any, threading.Event, Callable[[str], None]], None], backend: str) -> None:
        super().__init__()
        self.inject_fault, self.backend, self.lines = inject, backend, []

    def inject(self) -> None:
        self.inject_fault(self.emulator[self.backend], self.stop, self.lines.append)


@scenarios(Scenario(DAG_ID, "shared", injector=lambda: DemoInjector(inject_preemption, "kubernetes")))
def test_fanout_through_the_rest_api(scenario_run: ScenarioRun) -> None:
    """The DAG's own params, as the UI's trigger button sends them: 5 shards x 2000 rows."""
    stack, emulator, run_id = scenario_run.stack, scenario_run.emulator["kubernetes"], scenario_run.run_id
    assert isinstance(scenario_run.injector, DemoInjector)
    assert scenario_run.state() == "success", "\n".join(scenario_run.injector.lines)

    instances = stack.task_instances(DAG_ID, run_id)
    shards = sorted((ti for ti in instances if ti["task_id"] == "score_shard"), key=lambda ti: ti["map_index"])
    assert [ti["map_index"] for ti in shards] == [0, 1, 2, 3, 4]  # one mapped instance per shard
    assert {ti["rendered_map_index"] for ti in shards} == {f"shard {i}" for i in range(5)}
    assert {ti["state"] for ti in instances} == {"success"}
    assert all(ti["try_number"] == 1 for ti in shards)  # the preemption was absorbed inside the try

    interruptions = [stack.xcom(DAG_ID, run_id, "score_shard", "gpu_interruptions", i) for i in range(5)]
    preempted = [fault["pod"] for fault in emulator.faults if fault["fault"] == "preempt"]
    assert len(preempted) == 1
    assert [i["workload"] for items in interruptions for i in items] == preempted  # injected == reported
    assert all(i["reason"] == "TerminationByKubelet" for items in interruptions for i in items)
    results = [stack.xcom(DAG_ID, run_id, "score_shard", map_index=i) for i in range(5)]
    assert [r["shard"] for r in results] == [0, 1, 2, 3, 4]
    assert stack.xcom(DAG_ID, run_id, "reduce") == {
        "succeeded": 5,
        "shards": 5,
        "total_score": expected_total(5, 2000),
    }

    # The task logs tell the same story: the reduce step's summary, the preempted shard's warning.
    logs = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
    reduce_log = render((logs / "task_id=reduce" / "attempt=1.log").read_text())
    assert "5 of 5 shards succeeded (100%)" in reduce_log
    assert f"total score {expected_total(5, 2000)} over 10000 rows" in reduce_log
    shard_files = (logs / "task_id=score_shard").glob("map_index=*/attempt=1.log")
    shard_logs = "".join(render(f.read_text()) for f in shard_files)
    assert shard_logs.count("GPU interruption 1: preempted (TerminationByKubelet)") == 1
    # Every shard pod ever scheduled (the preempted one included) went to an H100 spot node.
    api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
    scheduled = [
        e.message
        for e in api.list_namespaced_event("default").items
        if e.reason == "Scheduled" and e.involved_object.name.startswith("score-shard-")
    ]
    assert len(scheduled) == 6  # five shards and the preempted shard's replacement
    assert all(m.endswith((" to gpu-spot-1", " to gpu-spot-2")) for m in scheduled), scheduled

    printed: list[str] = []
    report(stack, run_id, printed.append)  # what `make demo` prints at the end
    assert sum("interrupted: TerminationByKubelet" in line for line in printed) == 1
    assert any(line.startswith("  shard 3  success  on H100/spot") for line in printed)


@scenarios(
    Scenario(BATCH_DAG_ID, "shared", injector=lambda: DemoInjector(inject_reclaim, "batch"), conf={"epochs": 12})
)
def test_batch_training_through_the_rest_api(scenario_run: ScenarioRun) -> None:
    """The Batch example DAG as ``make demo`` runs it: its spot host reclaimed once, the checkpoint
    carries the training across the attempt Batch retries, and ``evaluate`` reads the result."""
    stack, run_id = scenario_run.stack, scenario_run.run_id
    stack_batch_emulator = scenario_run.emulator["batch"]
    assert isinstance(scenario_run.injector, DemoInjector)
    assert scenario_run.state() == "success", "\n".join(scenario_run.injector.lines)
    result = stack.xcom(BATCH_DAG_ID, run_id, "train")
    assert result["epoch"] == 12 and result["loss"] < 1.0
    assert stack.xcom(BATCH_DAG_ID, run_id, "evaluate") == result
    [interruption] = stack.xcom(BATCH_DAG_ID, run_id, "train", "gpu_interruptions")
    reclaimed = [f for f in stack_batch_emulator.faults if f["fault"] == "reclaim"]
    assert interruption["reason"] == "SpotReclaim" and interruption["workload"] == reclaimed[-1]["job"]
    assert stack.xcom(BATCH_DAG_ID, run_id, "train", "gpu_accelerator") == {
        "accelerator": "A10G",
        "capacity": "spot",
        "location": "gpu-spot",
    }
    printed: list[str] = []
    report_batch(stack, run_id, printed.append)  # what `make demo` prints at the end
    assert any("interrupted: SpotReclaim" in line for line in printed)

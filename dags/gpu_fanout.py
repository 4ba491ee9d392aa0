"""Fan GPU work out over shards on spot capacity, and reduce once enough shards succeeded.

What it shows:

* ``plan_shards`` decides the shards at run time (``params.shards``); ``score_shard`` is one
  ``GPUKubernetesOperator`` mapped over them with ``.partial().expand()`` (Metaflow's foreach).
* Each shard asks for one H100 on spot and, when spot has no H100 left or keeps being reclaimed,
  falls back to on-demand and to the next candidate, an L4 (``accelerator=[...]``, ``SpotPolicy``).
  A preempted shard is resubmitted inside the same try; its interruptions land in XCom.
* ``map_index_template`` names each mapped instance "shard N" in the UI;
  ``max_active_tis_per_dagrun`` caps how many shards hold GPUs at once.
* The workload returns its result by printing ``::airflow-gpu-result::<json>``: no XCom sidecar.
* ``reduce`` runs when all shards are done and proceeds if at least ``params.min_success_ratio``
  of them succeeded (Flyte's ``min_success_ratio``), via ``require_success_ratio``.

It runs against a real cluster through the ``kubernetes_default`` connection, or against the local
emulator (``make demo`` sets that up).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.utils.mapping import require_success_ratio

# Scores one shard; on SIGTERM (spot reclaim) it stops, and the operator reruns it elsewhere.
SCORE_SHARD = """
import argparse, hashlib, json, os, signal, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--shard", type=int)
parser.add_argument("--rows", type=int)
args = parser.parse_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
print(f"shard {args.shard} on {os.environ.get('AIRFLOW_GPU_ACCELERATOR')} "
      f"({os.environ.get('AIRFLOW_GPU_CAPACITY')}), attempt {os.environ.get('AIRFLOW_GPU_ATTEMPT')}", flush=True)
score = 0
for row in range(args.rows):
    score += int(hashlib.sha256(f"{args.shard}:{row}".encode()).hexdigest()[:4], 16) % 7
    if row % (args.rows // 10) == 0:
        time.sleep(0.2)
print("::airflow-gpu-result::" + json.dumps({"shard": args.shard, "rows": args.rows, "score": score}), flush=True)
"""


@dag(
    dag_id="gpu_fanout",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-provider-gpu", "example"],
    params={
        "shards": Param(5, type="integer", minimum=1, maximum=100),
        "rows": Param(2000, type="integer", minimum=10),
        "min_success_ratio": Param(0.8, type="number", exclusiveMinimum=0, maximum=1),
    },
    doc_md=__doc__,
)
def gpu_fanout() -> None:
    @task
    def plan_shards(params: dict[str, Any] | None = None) -> list[list[str]]:
        assert params is not None
        return [["--shard", str(i), "--rows", str(params["rows"])] for i in range(params["shards"])]

    scored = GPUKubernetesOperator.partial(
        task_id="score_shard",
        name="score-shard",
        accelerator=["H100", "L4"],
        capacity="spot",
        spot=SpotPolicy(max_interruptions=2, grace_period_seconds=10, capacity_timeout=60),
        cmds=["python3", "-c", SCORE_SHARD],
        cpu=2,
        memory="8Gi",
        kubernetes_conn_id="kubernetes_default",
        namespace="default",
        get_logs=True,
        map_index_template="shard {{ task.arguments[1] }}",
        max_active_tis_per_dagrun=3,
    ).expand(arguments=plan_shards())

    @task(trigger_rule="all_done")
    def reduce(
        results: list[dict[str, Any] | None], params: dict[str, Any] | None = None, **context: Any
    ) -> dict[str, Any]:
        assert params is not None
        report = require_success_ratio(context, "score_shard", params["min_success_ratio"])
        scores = [r for r in results if r]
        total = sum(r["score"] for r in scores)
        print(f"{report}; total score {total} over {sum(r['rows'] for r in scores)} rows")
        return {"succeeded": report.succeeded, "shards": report.total, "total_score": total}

    reduce(scored.output)


gpu_fanout()

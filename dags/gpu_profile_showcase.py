"""Profile GPU shards, on Kubernetes or AWS Batch, chosen from the trigger form.

What it shows:

* Typed ``Params`` make the trigger form: the accelerator is picked from the catalog's NVIDIA GPU
  names, with the number of GPUs per shard, the number of shards, spot on or off and the backend.
* ``plan_kubernetes_shards`` and ``plan_batch_shards`` turn them into one set of operator arguments
  per shard, and one GPU operator per backend is mapped over them with ``.partial().expand_kwargs()``:
  the accelerator spec is checked when each shard starts, the backend not chosen maps over nothing
  and is skipped.
* Every shard is profiled (``gpu_profile`` is on for NVIDIA GPUs): XCom ``gpu_profile`` holds its
  per-GPU summary, energy, cost and advice, and the "GPU Profile" tab of the task instance and of
  the DAG run shows the charts, shards side by side.
* The workload keeps one process busy whatever the number of GPUs, so with ``gpus`` above 1 the
  report says that one GPU worked while the others idled.

It runs against real clusters through the ``kubernetes_default`` and ``aws_default`` connections,
or against the local emulators (``make demo`` sets that up and runs it on both backends).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from airflow_gpu.accelerators import catalog
from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

#: What the trigger form offers: every NVIDIA GPU of the catalog.
ACCELERATORS = [n for n in catalog.names() if catalog.get(n).vendor == "nvidia" and catalog.get(n).kind == "gpu"]
#: Where a shard goes when the chosen accelerator is not to be had (the emulators have L4s).
FALLBACK = "L4"

# One shard of work: a busy loop holding some memory, stopping cleanly on SIGTERM (spot reclaim).
SHARD = """
import json, os, signal, sys, time
shard, seconds = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
held = bytearray(64 * 2**20)  # stands for the model on the device
where = os.environ.get("AIRFLOW_GPU_ACCELERATOR"), os.environ.get("AIRFLOW_GPU_CAPACITY")
print(f"shard {shard} on {where[0]} ({where[1]})", flush=True)
end, steps = time.monotonic() + seconds, 0
while time.monotonic() < end:
    sum(i * i for i in range(20_000))
    steps += 1
print("::airflow-gpu-result::" + json.dumps({"shard": shard, "steps": steps}), flush=True)
"""


@dag(
    dag_id="gpu_profile_showcase",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-provider-gpu", "example", "profiling"],
    params={
        "accelerator": Param("L4", type="string", enum=ACCELERATORS, title="Accelerator"),
        "gpus": Param(1, type="integer", minimum=1, maximum=8, title="GPUs per shard"),
        "shards": Param(2, type="integer", minimum=1, maximum=16, title="Shards"),
        "spot": Param(False, type="boolean", title="Spot capacity", description="falls back to on-demand"),
        "backend": Param("kubernetes", type="string", enum=["kubernetes", "batch"], title="Backend"),
        "seconds": Param(8, type="integer", minimum=1, maximum=3600, title="Seconds of work per shard"),
    },
    doc_md=__doc__,
)
def gpu_profile_showcase() -> None:
    @task
    def plan(backend: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One set of operator arguments per shard, for the chosen backend only."""
        assert params is not None
        if params["backend"] != backend:
            return []
        accelerator = f"{params['accelerator']}:{params['gpus']}"
        candidates = [accelerator]
        if params["accelerator"] != FALLBACK:
            candidates.append(f"{FALLBACK}:{params['gpus']}")
        shards = []
        for shard in range(params["shards"]):
            argv = ["python3", "-c", SHARD, str(shard), str(params["seconds"])]
            arguments: dict[str, Any] = {"accelerator": candidates}
            if backend == "kubernetes":
                arguments |= {"cmds": argv, "capacity": "spot-if-available" if params["spot"] else "on-demand"}
            else:
                queues = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"} if params["spot"] else {}
                arguments |= {"command": argv, "job_queues": queues or {"on-demand": "gpu-on-demand"}}
            shards.append(arguments)
        return shards

    policy = SpotPolicy(max_interruptions=2, grace_period_seconds=5, capacity_timeout=20)
    # Two samples a second: a short shard still gets the ten per GPU that advice needs.
    profiling = {"profile_interval": 0.5}
    GPUKubernetesOperator.partial(
        task_id="shard_on_kubernetes",
        name="profile-shard",
        spot=policy,
        cpu=1,
        memory="2Gi",
        kubernetes_conn_id="kubernetes_default",
        namespace="default",
        get_logs=True,
        on_finish_action="delete_pod",
        **profiling,
        map_index_template="shard {{ task.cmds[3] }}",
    ).expand_kwargs(plan.override(task_id="plan_kubernetes_shards")("kubernetes"))
    GPUBatchOperator.partial(
        task_id="shard_on_batch",
        job_name="profile-shard",
        spot=policy,
        aws_conn_id="aws_default",
        poll_interval=2,
        **profiling,
        map_index_template="shard {{ task.command[3] }}",
    ).expand_kwargs(plan.override(task_id="plan_batch_shards")("batch"))


gpu_profile_showcase()

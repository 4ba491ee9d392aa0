"""The soak's DAGs (copied into the soak's DAG folder by ``airflow_gpu.testing.soak.stack``).

Every result is a pure function of the task's arguments (``expected_shard``, ``expected_training``)
so that the soak can check each XCom against what it must be, whatever faults hit the task on the
way. Spot policies allow many interruptions and tasks retry: a fault the provider is built to
absorb must never fail a task; only a person's "Mark Failed" may.

Each kind of DAG runs on both backends, deferrable and not: the 50-shard fan-out (pods on Kubernetes,
jobs on AWS Batch), the one-machine training (Batch) and the two-machine Accelerate training
(``AccelerateTrainOperator``: an Indexed Job of two spot H100 machines and its headless Service on
Kubernetes; a multi-node parallel job of two on-demand nodes on Batch). The two-machine training runs
``dags/training/tiny_regression.py`` on CPU (gloo): its result depends on the epoch a resumed run
started from, so ``training_result_problem`` judges its shape instead of one value.
"""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

import airflow_gpu

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Each task try may be lost to a killed worker or scheduler; the soak's faults stay below this.
RETRIES = 4
SHARD_SECONDS = 4.0
#: A shard lingers this long after its result line (a workload's teardown: uploads, a final flush):
#: the moment a reclaim after the result line and before the exit lands in.
RESULT_HOLD_SECONDS = 1.0
EPOCHS = 10
#: The Batch training's default epoch (the run's conf may say another: ``--epoch-seconds``).
EPOCH_SECONDS = 0.4
ACCELERATE_EPOCHS = 4
#: The example DAGs' training script, from the checkout the soak runs in (every emulated machine is this host).
TRAINING_SCRIPT = str(Path(airflow_gpu.__file__).resolve().parents[2] / "dags" / "training" / "tiny_regression.py")

# One shard of scoring: a few seconds of "work", ended with the provider's result line.
SCORE_SHARD = """
import hashlib, json, os, signal, sys, time
shard, rows = int(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
score = 0
for row in range(rows):
    score += int(hashlib.sha256(f"{shard}:{row}".encode()).hexdigest()[:4], 16) % 7
    if row % (rows // 10) == 0:
        time.sleep(%(pause)s)
print("::airflow-gpu-result::" + json.dumps({"shard": shard, "rows": rows, "score": score}), flush=True)
time.sleep(%(hold)s)
""".replace("%(pause)s", str(SHARD_SECONDS / 10)).replace("%(hold)s", str(RESULT_HOLD_SECONDS))

# A training that checkpoints each epoch (per try of the task, under the run's workdir) and resumes.
TRAIN = """
import json, math, os, signal, sys, time
path = os.environ["CHECKPOINT_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
state = json.load(open(path)) if os.path.exists(path) else {"epoch": 0, "loss": 2.5}
def on_sigterm(*_):
    json.dump(state, open(path, "w"))
    sys.exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
epochs = int(os.environ["EPOCHS"])
while state["epoch"] < epochs:
    time.sleep(float(os.environ["EPOCH_SECONDS"]))
    state["epoch"] += 1
    state["loss"] = round(2.5 * math.exp(-0.15 * state["epoch"]), 4)
    json.dump(state, open(path, "w"))
print("::airflow-gpu-result::" + json.dumps(state), flush=True)
"""


def expected_shard(shard: int, rows: int) -> dict[str, int]:
    """What ``score_shard`` returns for one shard, computed here as the workload does."""
    score = sum(int(hashlib.sha256(f"{shard}:{row}".encode()).hexdigest()[:4], 16) % 7 for row in range(rows))
    return {"shard": shard, "rows": rows, "score": score}


def expected_training(epochs: int = EPOCHS) -> dict[str, Any]:
    return {"epoch": epochs, "loss": round(2.5 * math.exp(-0.15 * epochs), 4)}


def training_result_problem(value: Any, epochs: int = ACCELERATE_EPOCHS, try_number: int = 1) -> str | None:
    """What is wrong with a two-machine training's result, or None: both ranks on two machines, and
    the epochs from where it (re)started to the last, one loss each. A later attempt may start at the
    last epoch with nothing left to train: the attempt before it saved the final checkpoint and was
    reclaimed before it could exit (a reclaim after its last epoch). So may a later try's first attempt
    (``try_number``; the checkpoint is the run's, ``AIRFLOW_GPU_ATTEMPT`` counts a try's Jobs): the slice
    killed a worker after the last epoch and reclaimed the main machine after its result line; the retry
    replaced that failed Job, which resumed at the last epoch."""
    if not isinstance(value, dict):
        return "no result"
    if value.get("ranks") != [0, 1] or value.get("machines") != [0, 1] or value.get("world_size") != 2:
        return "not both ranks on two machines"
    start, losses = value.get("start_epoch"), value.get("losses")
    if not isinstance(start, int) or not isinstance(losses, list) or not 0 <= start <= epochs:
        return "no start epoch or losses"
    if start == epochs and int(value.get("attempt") or 1) < 2 and try_number < 2:
        return f"the first attempt started at the last epoch ({epochs}): nothing was trained"
    if start + len(losses) != epochs:
        return f"trained {len(losses)} epoch(s) from epoch {start}, not to epoch {epochs}"
    return None


def fanout(dag_id: str, deferrable: bool) -> DAG:
    """The 50-shard fan-out with its reduce: on Kubernetes (``GPUKubernetesOperator`` pods, spot first
    with on-demand capacity in the accelerator list) or on AWS Batch (``GPUBatchOperator`` jobs on the
    spot queue, the on-demand queue the fallback), by the DAG's name."""
    with DAG(
        dag_id, schedule=None, start_date=START, catchup=False, tags=["soak"],
        params={"shards": Param(50, type="integer"), "rows": Param(200, type="integer")},
        max_active_runs=1, default_args={"retries": RETRIES, "retry_delay": timedelta(seconds=2)},
    ) as dag:  # fmt: skip

        @task
        def plan_shards(params: dict[str, Any] | None = None) -> list[list[str]]:
            assert params is not None
            return [[str(i), str(params["rows"])] for i in range(params["shards"])]

        @task
        def plan_commands(params: dict[str, Any] | None = None) -> list[list[str]]:
            assert params is not None
            return [["python3", "-c", SCORE_SHARD, str(i), str(params["rows"])] for i in range(params["shards"])]

        scored = (
            _batch_shards(deferrable).expand(command=plan_commands())
            if "_batch" in dag_id
            else _kubernetes_shards(deferrable).expand(arguments=plan_shards())
        )

        @task(trigger_rule="all_done")
        def reduce(results: list[dict[str, Any] | None]) -> dict[str, Any]:
            scores = [r for r in results if r]
            return {"shards": len(scores), "total_score": sum(r["score"] for r in scores)}

        reduce(scored.output)  # an XComArg: the list at run time
    return dag


def _kubernetes_shards(deferrable: bool) -> Any:
    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
    from airflow_gpu.spot.policy import SpotPolicy

    return GPUKubernetesOperator.partial(
        task_id="score_shard", name="soak-shard", accelerator=["H100", "L4"], capacity="spot",
        spot=SpotPolicy(max_interruptions=25, grace_period_seconds=2, capacity_timeout=300),
        cmds=["python3", "-c", SCORE_SHARD], cpu=1, memory="1Gi", kubernetes_conn_id="kubernetes_default",
        namespace="default", get_logs=True, poll_interval=1, deferrable=deferrable,
        max_active_tis_per_dagrun=8 if deferrable else 3,
    )  # fmt: skip


def _batch_shards(deferrable: bool) -> Any:
    from airflow_gpu.operators.batch import GPUBatchOperator
    from airflow_gpu.spot.policy import SpotPolicy

    return GPUBatchOperator.partial(
        task_id="score_shard", job_name="soak-shard", accelerator=["A10G", "L4"], image="auto",
        job_queues={"spot": "gpu-spot", "on-demand": "gpu-on-demand"},
        spot=SpotPolicy(max_interruptions=25, capacity_timeout=300, grace_period_seconds=2),
        poll_interval=1, awslogs_fetch_interval=1, deferrable=deferrable,
        max_active_tis_per_dagrun=8 if deferrable else 3,
    )  # fmt: skip


def training(dag_id: str, deferrable: bool) -> DAG:
    from airflow_gpu.operators.batch import GPUBatchOperator
    from airflow_gpu.spot.policy import SpotPolicy

    with DAG(
        dag_id, schedule=None, start_date=START, catchup=False, tags=["soak"], max_active_runs=1,
        default_args={"retries": RETRIES, "retry_delay": timedelta(seconds=2)},
    ) as dag:  # fmt: skip
        GPUBatchOperator(
            task_id="train", accelerator=["A10G", "L4"], image="auto", command=["python3", "-c", TRAIN],
            environment={
                "EPOCHS": str(EPOCHS),
                "EPOCH_SECONDS": f"{{{{ dag_run.conf.get('epoch_seconds', {EPOCH_SECONDS}) }}}}",
                "CHECKPOINT_FILE": "{{ dag_run.conf.get('workdir', '/tmp') }}/{{ run_id | replace(':', '_') }}/c.json",
            },
            job_queues={"spot": "gpu-spot", "on-demand": "gpu-on-demand"},
            spot=SpotPolicy(max_interruptions=25, capacity_timeout=300, grace_period_seconds=2),
            poll_interval=1, awslogs_fetch_interval=1, deferrable=deferrable,
        )  # fmt: skip
    return dag


def accelerate(dag_id: str, deferrable: bool, port: int) -> DAG:
    """Two machines of ``AccelerateTrainOperator``: an Indexed Job of two spot H100 pods and its headless
    Service on Kubernetes, or a multi-node parallel job of two A10G nodes on AWS Batch's on-demand queue
    (AWS runs none on Spot), by the DAG's name."""
    from airflow_gpu.operators.accelerate import AccelerateTrainOperator
    from airflow_gpu.spot.policy import SpotPolicy

    with DAG(
        dag_id, schedule=None, start_date=START, catchup=False, tags=["soak"], max_active_runs=1,
        default_args={"retries": RETRIES, "retry_delay": timedelta(seconds=2)},
    ) as dag:  # fmt: skip
        where: dict[str, Any] = (
            {
                "target": "batch", "accelerator": "A10G", "job_queue": "gpu-on-demand",
                "spot": SpotPolicy(max_interruptions=25, capacity_timeout=300, grace_period_seconds=2),
            }
            if "_batch" in dag_id
            else {
                "target": "kubernetes", "kubernetes_conn_id": "kubernetes_default", "namespace": "default",
                "accelerator": "H100", "capacity": "spot",
                "spot": SpotPolicy(max_interruptions=25, grace_period_seconds=2, capacity_timeout=300),
            }
        )  # fmt: skip
        AccelerateTrainOperator(
            task_id="train", training_script=TRAINING_SCRIPT, image="huggingface/accelerate:gpu-release-1.15.0",
            script_args=[
                "--epochs", str(ACCELERATE_EPOCHS), "--epoch-seconds", "1", "--checkpoint-dir",
                "{{ dag_run.conf.get('workdir', '/tmp') }}/{{ run_id | replace(':', '_') }}/accelerate",
            ],
            env={"ACCELERATE_USE_CPU": "1"}, num_machines=2,
            main_process_port=f"{{{{ dag_run.conf.get('port', {port}) }}}}",
            poll_interval=1, deferrable=deferrable,  # profiled, the default for NVIDIA GPUs: what users run
            **where,
        )  # fmt: skip
    return dag


FANOUT = (
    "soak_fanout_kubernetes", "soak_fanout_kubernetes_deferrable", "soak_fanout_batch", "soak_fanout_batch_deferrable",
)  # fmt: skip
TRAINING = ("soak_train_batch", "soak_train_batch_deferrable")
#: The first of each DAG's rendezvous ports (``runner.run_port`` gives each run its own, from the run's
#: conf): every emulated machine is this host (not the e2e scenarios' 29500-29570).
ACCELERATE = {
    "soak_accelerate_kubernetes": 29600, "soak_accelerate_kubernetes_deferrable": 29650,
    "soak_accelerate_batch": 29700, "soak_accelerate_batch_deferrable": 29750,
}  # fmt: skip
PORTS_PER_DAG = 50
for _dag_id in FANOUT:
    fanout(_dag_id, deferrable=_dag_id.endswith("deferrable"))
for _dag_id in TRAINING:
    training(_dag_id, deferrable=_dag_id.endswith("deferrable"))
for _dag_id, _port in ACCELERATE.items():
    accelerate(_dag_id, deferrable=_dag_id.endswith("deferrable"), port=_port)

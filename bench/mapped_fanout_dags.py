"""The DAGs of bench/mapped_fanout.py: N GPU shards mapped with ``.partial().expand()``, then a reduce.

Each shard is one H100 of a spot node running a simulated container (image ``simulated.local/...``:
the emulator runs no process, so that 200 pods fit on a small machine). It prints its result line
``::airflow-gpu-result::{"shard": i, "value": v}`` at once, then runs ``SIMULATED_SECONDS``; a
preemption (SIGTERM) ends it at once with 143, as a workload that checkpoints quickly does.

- ``mapped_fanout_ours``: ``GPUKubernetesOperator``, deferrable (the triggerer replaces a preempted
  pod itself); ``reduce`` sums the shards' XCom results (the operator reads the result line).
  ``gpu_profile=False``: the profiler wraps ``cmds``, and a simulated container runs none.
- ``mapped_fanout_baseline``: the official ``KubernetesPodOperator``, deferrable, written by hand as
  a user does today; a preempted pod fails the try and Airflow's retry makes the next pod.
- ``mapped_fanout_baseline_sync``: the same, not deferrable (a worker slot per running shard).

KPO has no XCom without its ``airflow-xcom-sidecar``, which needs ``pods/exec`` into a real
container; the emulator's simulated containers have none. So the baseline keeps its pods
(``on_finish_action="keep_pod"``) and its reduce reads the result line of every Succeeded shard pod
(one LIST, a log GET each), then deletes the pods, as KPO's default would have. A shard that
succeeded twice is summed twice: the check stays able to fail.

Both sides: ``retries=2`` with the same ``retry_delay``, the same termination grace and
``poll_interval``. The bench sets the shard count and times in the environment of every Airflow part
(``MAPPED_FANOUT_*``, read at parse time) and creates the connection ``k8s_<dag_id>`` to each DAG's
own emulator.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy
from airflow_gpu.utils.results import RESULT_MARKER, last_result

SHARDS = int(os.environ.get("MAPPED_FANOUT_SHARDS", "200"))
SECONDS = float(os.environ.get("MAPPED_FANOUT_SECONDS", "45"))
RETRY_DELAY = float(os.environ.get("MAPPED_FANOUT_RETRY_DELAY", "10"))
RETRIES = 2
GRACE_SECONDS = 5
POLL_INTERVAL = 2  # KPO's default, set on both sides
IMAGE = "simulated.local/shard-trainer"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
WHO = {
    "ours": "mapped_fanout_ours",
    "baseline": "mapped_fanout_baseline",
    "baseline_sync": "mapped_fanout_baseline_sync",
}


def value(shard: int) -> int:
    """What shard ``shard`` computes: distinct per shard, so that a lost or doubled shard changes the sum."""
    return (shard * 7919) % 1009 + 1


def expected(shards: int) -> dict[str, int]:
    return {"shards": shards, "distinct": shards, "sum": sum(value(i) for i in range(shards))}


def shard_env(shard: int, seconds: float = SECONDS) -> dict[str, str]:
    result = json.dumps({"shard": shard, "value": value(shard)})
    return {
        "SIMULATED_SECONDS": f"{seconds:g}",
        "SIMULATED_OUTPUT": f"shard {shard} starting\n{RESULT_MARKER}{result}",
    }


def summary(results: list[Any]) -> dict[str, int]:
    """The reduce: how many results, of how many distinct shards, and their sum."""
    found = [r for r in results if isinstance(r, dict)]
    return {
        "shards": len(found),
        "distinct": len({r.get("shard") for r in found}),
        "sum": sum(int(r.get("value", 0)) for r in found),
    }


def conn_id(dag_id: str) -> str:
    return f"k8s_{dag_id}"


COMMON: dict[str, Any] = {
    "task_id": "shard", "name": "shard", "namespace": "default", "image": IMAGE, "get_logs": True,
    "poll_interval": POLL_INTERVAL, "retries": RETRIES, "retry_delay": timedelta(seconds=RETRY_DELAY),
}  # fmt: skip
ENVIRONMENTS = [shard_env(i) for i in range(SHARDS)]


@task
def reduce(results: Any) -> dict[str, int]:
    return summary(list(results))


@task
def reduce_from_pods(connection: str, **context: Any) -> dict[str, Any]:
    """The baseline's reduce: the result line of each Succeeded shard pod of this run, then cleanup."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

    core = KubernetesHook(conn_id=connection).core_v1_client
    ti = context["ti"]
    selector = f"dag_id={ti.dag_id},task_id=shard,run_id={make_safe_label_value(context['run_id'])}"
    pods = core.list_namespaced_pod("default", label_selector=selector).items
    results = []
    succeeded = [p for p in pods if p.status.phase == "Succeeded"]
    for pod in succeeded:
        log = core.read_namespaced_pod_log(pod.metadata.name, "default", container="base", _preload_content=False)
        results.append(last_result(log.data.decode("utf-8", "replace").splitlines())[1])
    for pod in pods:  # what KPO's default on_finish_action would have deleted
        core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)
    requests = {"LIST pods": 1, "GET pods/log": len(succeeded), "DELETE pods": len(pods)}
    return {**summary(results), "requests": requests}


with DAG(WHO["ours"], schedule=None, start_date=START, catchup=False, tags=["bench"]):
    ours = GPUKubernetesOperator.partial(
        accelerator="H100:1", capacity="spot", spot=SpotPolicy(grace_period_seconds=GRACE_SECONDS), gpu_profile=False,
        deferrable=True, kubernetes_conn_id=conn_id(WHO["ours"]), **COMMON,
    ).expand(env_vars=ENVIRONMENTS)  # fmt: skip
    reduce(ours.output)

for _who, _deferrable in (("baseline", True), ("baseline_sync", False)):
    with DAG(WHO[_who], schedule=None, start_date=START, catchup=False, tags=["bench"]):
        # What a user writes by hand today for one H100 of a spot node.
        KubernetesPodOperator.partial(
            container_resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
            node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "karpenter.sh/capacity-type": "spot"},
            tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
            termination_grace_period=GRACE_SECONDS, on_finish_action="keep_pod", deferrable=_deferrable,
            kubernetes_conn_id=conn_id(WHO[_who]), **COMMON,
        ).expand(env_vars=ENVIRONMENTS) >> reduce_from_pods(conn_id(WHO[_who]))  # fmt: skip

"""Scenario DAGs of tests/e2e/test_gpu_lifecycle.py: what a person (Mark Failed) or a crash does to
a running GPU task. Each has an emulator of its own, reached through connection ``k8s_<dag_id>``.

Each workload waits for ``<dag_run.conf["workdir"]>/release`` (the test's injector creates it
when it has seen what it needs), writes ``release.sigterm.<shard>`` there when it gets SIGTERM,
and prints its attempt as the task's result. It writes ``release.ready.<shard>`` once its SIGTERM
trap is set: a pod is Running from its first process on (here the profiler, a Python starting up),
and a SIGTERM before the trap ends the workload before it could ever answer it. That keeps the
tests free of sleeps: the pod runs exactly as long as the test needs it to.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

WAIT = (
    'trap \'echo "$0" > "$RELEASE.sigterm.$0"; exit 143\' TERM; : > "$RELEASE.ready.$0"; '
    'echo "shard $0 waiting"; while [ ! -f "$RELEASE" ]; do sleep 0.2; done; '
    'echo "::airflow-gpu-result::{\\"shard\\": \\"$0\\", \\"attempt\\": $AIRFLOW_GPU_ATTEMPT}"'
)


def common(dag_id: str) -> dict[str, Any]:
    return {
        # These wait out a heartbeat timeout or a person's click while the other scenarios run:
        # first in line for an executor slot, so that the waiting starts early.
        "priority_weight": 1000,
        "weight_rule": "absolute",
        "accelerator": "L4",
        "cmds": ["sh", "-c", WAIT],
        "env_vars": {"RELEASE": "{{ dag_run.conf['workdir'] }}/release"},
        "spot": SpotPolicy(grace_period_seconds=5),
        "kubernetes_conn_id": f"k8s_{dag_id}",
        "namespace": "default",
        "poll_interval": 1,
    }


START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG("gpu_on_kill", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on a running GPU task."):
    GPUKubernetesOperator(task_id="train", name="on-kill", arguments=["solo"], **common("gpu_on_kill"))

with DAG("gpu_mapped_deferrable", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on one shard."):
    GPUKubernetesOperator.partial(
        task_id="train", name="shard", deferrable=True, **common("gpu_mapped_deferrable")
    ).expand(arguments=[["0"], ["1"], ["2"]])

with DAG("gpu_reattach", schedule=None, start_date=START, catchup=False, doc_md="A worker dies mid-run."):
    GPUKubernetesOperator(
        task_id="train", name="reattach", arguments=["solo"], retries=1, retry_delay=timedelta(seconds=1),
        **common("gpu_reattach"),
    )  # fmt: skip

with DAG("gpu_reattach_fixed_name", schedule=None, start_date=START, catchup=False, doc_md="Its pod name is reused."):
    GPUKubernetesOperator(
        task_id="train", name="fixed-name", random_name_suffix=False, arguments=["solo"], retries=1,
        retry_delay=timedelta(seconds=1), **common("gpu_reattach_fixed_name"),
    )  # fmt: skip

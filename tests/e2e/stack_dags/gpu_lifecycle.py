"""DAGs the stack end-to-end tests (tests/e2e/test_gpu_lifecycle.py) drive through the REST API.

Each workload waits for the file named by ``dag_run.conf["release"]`` (the test creates it when
it has seen what it needs), writes ``<release>.sigterm`` when it gets SIGTERM, and prints its
attempt as the task's result. That keeps the tests free of sleeps: the pod runs exactly as long
as the test needs it to.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

WAIT = (
    'trap \'echo "$0" > "$RELEASE.sigterm.$0"; exit 143\' TERM; '
    'echo "shard $0 waiting"; while [ ! -f "$RELEASE" ]; do sleep 0.2; done; '
    'echo "::airflow-gpu-result::{\\"shard\\": \\"$0\\", \\"attempt\\": $AIRFLOW_GPU_ATTEMPT}"'
)
# The stack runs these while the scenario runs hold its executor slots: first in line for a slot.
COMMON = {
    "priority_weight": 1000,
    "weight_rule": "absolute",
    "accelerator": "L4",
    "cmds": ["sh", "-c", WAIT],
    "env_vars": {"RELEASE": "{{ dag_run.conf['release'] }}"},
    "spot": SpotPolicy(grace_period_seconds=5),
    "kubernetes_conn_id": "kubernetes_default",
    "namespace": "default",
    "poll_interval": 1,
}
START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG("gpu_on_kill", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on a running GPU task."):
    GPUKubernetesOperator(task_id="train", name="on-kill", arguments=["solo"], **COMMON)

with DAG("gpu_mapped_deferrable", schedule=None, start_date=START, catchup=False, doc_md="Mark Failed on one shard."):
    GPUKubernetesOperator.partial(task_id="train", name="shard", deferrable=True, **COMMON).expand(
        arguments=[["0"], ["1"], ["2"]]
    )

with DAG("gpu_reattach", schedule=None, start_date=START, catchup=False, doc_md="A worker dies mid-run."):
    GPUKubernetesOperator(
        task_id="train", name="reattach", arguments=["solo"], retries=1, retry_delay=timedelta(seconds=1), **COMMON
    )

with DAG("gpu_reattach_fixed_name", schedule=None, start_date=START, catchup=False, doc_md="Its pod name is reused."):
    GPUKubernetesOperator(
        task_id="train", name="fixed-name", random_name_suffix=False, arguments=["solo"], retries=1,
        retry_delay=timedelta(seconds=1), **COMMON,
    )  # fmt: skip

"""The official KubernetesPodOperator, unmodified, pointed at the Kubernetes emulator.

The test sets KUBECONFIG, KPO_EXIT (the container's exit code) and KPO_DEFERRABLE.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG("kpo_on_emulator", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    KubernetesPodOperator(
        task_id="hello",
        name="hello",
        namespace="default",
        image="busybox",
        cmds=["sh", "-c", "echo line-one; sleep 1; echo line-two; exit ${EXIT_CODE:-0}"],
        env_vars={"EXIT_CODE": os.environ.get("KPO_EXIT", "0")},
        config_file=os.environ.get("KUBECONFIG"),
        in_cluster=False,
        get_logs=True,
        deferrable=os.environ.get("KPO_DEFERRABLE") == "1",
        poll_interval=1,
        on_finish_action="keep_pod",
    )

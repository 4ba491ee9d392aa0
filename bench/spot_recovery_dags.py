"""The DAGs of bench/spot_recovery.py: one task ``train`` each, on 8 H100s of a spot node or host.

Ours (``GPUKubernetesOperator``, ``GPUBatchOperator``) and the baseline (the official
``KubernetesPodOperator`` and ``BatchOperator``, written by hand as a user does today), each sync
and deferrable. Every DAG talks to an emulator of its own through the connection
``k8s_<dag_id>`` or ``aws_<dag_id>`` that the bench creates; for the baseline on Batch the bench
also registers the job definition ``BASELINE_JOB_DEFINITION`` (no ``retryStrategy``: a reclaimed
job fails). ``dag_run.conf["workdir"]`` holds the release file.

Both sides get ``retries=1``; the baseline keeps Airflow's default ``retry_delay``
(``[core] default_task_retry_delay``), which is what its retry waits. Both get the same
termination grace (``GRACE_SECONDS``) and the same ``poll_interval``.
"""

from __future__ import annotations

import sys
from typing import Any

import pendulum
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

#: SIGTERM-to-SIGKILL: ours through its SpotPolicy, the baseline pod through KPO's
#: ``termination_grace_period``; on Batch the emulator's ``stop_timeout`` (ECS's stop timeout) for both.
GRACE_SECONDS = 5
#: KPO's default; set on every operator so that no side waits on a longer poll than the other.
POLL_INTERVAL = 2
BASELINE_JOB_DEFINITION = "spot-recovery-baseline"
WHO = ("ours", "baseline")
BACKENDS = ("kubernetes", "batch")
MODES = ("sync", "deferrable")
H100_8 = {"GPU": "8", "VCPU": "192", "MEMORY": "1887436"}  # a p5.48xlarge, as ours asks for H100:8
START = pendulum.datetime(2026, 1, 1, tz="UTC")

# Prints progress, then holds until the bench creates the release file: the bench preempts the
# first run once it holds, measures when the replacement is Running, then lets it finish. A
# SIGTERM (the preemption) ends it at once, as a workload that checkpoints quickly does.
WORKLOAD = """
import os, signal, sys, time
release = os.environ["RELEASE_FILE"]
def stop(*_):
    print("SIGTERM: stopping", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
for step in range(1, 4):
    print("step", step, flush=True)
    time.sleep(0.1)  # the step's work
print("holding", flush=True)
deadline = time.monotonic() + 1800  # never outlive a bench that died
while not os.path.exists(release):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)  # polls for the bench's release file: an observable state
print("released", flush=True)
"""
COMMAND = [sys.executable, "-c", WORKLOAD]
RELEASE_FILE = "{{ dag_run.conf['workdir'] }}/release"


def dag_id(who: str, backend: str, mode: str) -> str:
    return f"spot_recovery_{who}_{backend}_{mode}"


def _kubernetes(who: str, deferrable: bool, conn_id: str) -> KubernetesPodOperator:
    common: dict[str, Any] = {
        "task_id": "train", "name": "train", "namespace": "default", "kubernetes_conn_id": conn_id,
        "cmds": COMMAND, "env_vars": {"RELEASE_FILE": RELEASE_FILE}, "get_logs": True,
        "deferrable": deferrable, "poll_interval": POLL_INTERVAL, "retries": 1,
    }  # fmt: skip
    if who == "ours":
        return GPUKubernetesOperator(
            accelerator="H100:8", capacity="spot", spot=SpotPolicy(grace_period_seconds=GRACE_SECONDS), **common
        )
    return KubernetesPodOperator(  # what a user writes by hand for the same node today
        image="pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime",
        container_resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "8"}),
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "karpenter.sh/capacity-type": "spot"},
        tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        termination_grace_period=GRACE_SECONDS,
        **common,
    )


def _batch(who: str, deferrable: bool, conn_id: str) -> BatchOperator:
    common: dict[str, Any] = {
        "task_id": "train", "job_name": "train", "aws_conn_id": conn_id, "deferrable": deferrable,
        "poll_interval": POLL_INTERVAL, "retries": 1,
    }  # fmt: skip
    if who == "ours":
        return GPUBatchOperator(
            accelerator="H100:8", command=COMMAND, environment={"RELEASE_FILE": RELEASE_FILE},
            job_queues={"spot": "gpu-spot", "on-demand": "gpu-on-demand"},
            spot=SpotPolicy(grace_period_seconds=GRACE_SECONDS), **common,
        )  # fmt: skip
    return BatchOperator(
        job_queue="gpu-spot",
        job_definition=BASELINE_JOB_DEFINITION,
        container_overrides={"command": COMMAND, "environment": [{"name": "RELEASE_FILE", "value": RELEASE_FILE}]},
        **common,
    )


DAGS: dict[str, DAG] = {}
for _who in WHO:
    for _backend in BACKENDS:
        for _mode in MODES:
            _id = dag_id(_who, _backend, _mode)
            with DAG(_id, schedule=None, start_date=START, catchup=False, tags=["bench"]) as DAGS[_id]:
                connection = f"{'k8s' if _backend == 'kubernetes' else 'aws'}_{_id}"
                (_kubernetes if _backend == "kubernetes" else _batch)(_who, _mode == "deferrable", connection)

"""AccelerateTrainOperator scenarios run on the shared stack by tests/e2e/test_accelerate_training.py.

``accelerate_kubernetes_preempt`` trains two machines (an Indexed Job) on spot H100 nodes of its
own Kubernetes emulator (connection ``k8s_accelerate_kubernetes_preempt``); the test reclaims the
rank-1 machine mid-run. ``accelerate_kubernetes_deferrable_preempt`` is the same training deferred
to the triggerer, which replaces the Job itself. ``accelerate_kubernetes_reattach`` trains long
enough for the test to kill its worker and the next try to take the running Job over. The emulated
machines have no CUDA, so the processes use gloo on CPU. ``accelerate_kubernetes_quota`` runs two
simulated machines in a namespace whose GPU quota admits one.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.accelerate import AccelerateTrainOperator
from airflow_gpu.spot.policy import SpotPolicy

SCRIPT = str(Path(__file__).resolve().parent / "training" / "tiny_regression.py")


def scenario(dag_id: str, **operator: Any) -> None:
    """One DAG with one training task ``train`` against the emulator of connection ``k8s_<dag_id>``;
    the emulated machines have no CUDA, and each scenario listens on its own rendezvous port."""
    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
             tags=["e2e-scenario"]):  # fmt: skip
        AccelerateTrainOperator(
            task_id="train", target="kubernetes", kubernetes_conn_id=f"k8s_{dag_id}", namespace="default",
            training_script=SCRIPT, image="huggingface/accelerate:gpu-release-1.15.0",
            env={"ACCELERATE_USE_CPU": "1"}, **operator,
        )  # fmt: skip


scenario(
    "accelerate_kubernetes_preempt",
    # Long enough epochs that the reclaim lands mid-run; the checkpoint lets the new Job resume.
    script_args=["--epochs", "6", "--epoch-seconds", "1", "--checkpoint-dir", "{{ dag_run.conf['workdir'] }}/ckpt"],
    accelerator="H100",
    num_machines=2,
    main_process_port=29530,  # every emulated machine is this host: not the example DAG's ports
    capacity="spot",
    spot=SpotPolicy(max_interruptions=2, grace_period_seconds=5),
    poll_interval=0.5,
    retry_delay=timedelta(seconds=1),
)
scenario(  # the same, deferred: the triggerer watches the Job and creates the next one itself
    "accelerate_kubernetes_deferrable_preempt",
    deferrable=True,
    script_args=["--epochs", "6", "--epoch-seconds", "1", "--checkpoint-dir", "{{ dag_run.conf['workdir'] }}/ckpt"],
    accelerator="H100",
    num_machines=2,
    main_process_port=29550,
    capacity="spot",
    spot=SpotPolicy(max_interruptions=2, grace_period_seconds=5),
    poll_interval=0.5,
    retry_delay=timedelta(seconds=1),
)
scenario(  # long enough to outlive a dead worker's heartbeat timeout (30 s on the stack) and the retry
    "accelerate_kubernetes_reattach",
    script_args=["--epochs", "30", "--epoch-seconds", "3"],
    accelerator="H100",
    num_machines=2,
    main_process_port=29560,
    capacity="spot",
    spot=SpotPolicy(grace_period_seconds=5),
    poll_interval=0.5,
    retries=1,
    retry_delay=timedelta(seconds=1),
)
scenario(  # one machine is GPUKubernetesOperator's own pod, deferred to the triggerer while it trains
    "accelerate_kubernetes_deferrable",
    deferrable=True,
    script_args=["--epochs", "3"],
    accelerator="L4",
    main_process_port=29540,
    poll_interval=1,
)
with DAG("accelerate_kubernetes_quota", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["e2e-scenario"]):  # fmt: skip
    # A GPU quota with room for one of the two machines (the test creates it): the admitted rank must
    # not hold its GPU at the rendezvous; past startup_timeout_seconds the task fails with the refusal.
    # Simulated machines: no process runs, so the scenario costs the stack next to nothing.
    AccelerateTrainOperator(
        task_id="train", target="kubernetes", kubernetes_conn_id="k8s_accelerate_kubernetes_quota",
        namespace="default", training_script=SCRIPT, image="simulated.local/train:1", accelerator="L4",
        num_machines=2, main_process_port=29570, gpu_profile=False, startup_timeout_seconds=5,
        env={"SIMULATED_SECONDS": "600"}, poll_interval=0.5,
    )  # fmt: skip

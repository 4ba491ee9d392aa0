"""Distributed training with Hugging Face Accelerate: on the worker, on Kubernetes, on AWS Batch.

What it shows:

* ``AccelerateTrainOperator`` turns "train this script on N GPUs on M machines" into a correct
  ``accelerate launch`` wherever the task runs; what cannot work (bf16 on a T4, more processes
  than GPUs, several machines on Batch spot) fails when the DAG file is parsed.
* ``train_on_worker``: two processes on the worker. Without a GPU there (a laptop, a CPU worker)
  they train on CPU over gloo, so the DAG runs anywhere.
* ``train_on_kubernetes``: two machines of one L4 each, an Indexed Job and a headless Service;
  rank 0 is the rendezvous. A preempted machine restarts the whole Job within the spot policy,
  and the script resumes from its checkpoint.
* ``train_on_batch``: the same on AWS Batch, a multi-node parallel job on the on-demand queue.
* ``report``: each training's return value is what its main process printed as
  ``::airflow-gpu-result::<json>`` (losses, ranks, machines).

The training script (``training/tiny_regression.py``) must be in the image for the clusters, and
its ``--checkpoint-dir`` on storage every machine sees (``checkpoint_root``); the ``emulated``
param says the machines have no CUDA (the local emulators), so the processes use gloo on CPU.
``make demo`` runs it against the emulators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from airflow_gpu.operators.accelerate import AccelerateTrainOperator

SCRIPT = str(Path(__file__).resolve().parent / "training" / "tiny_regression.py")
#: torch and accelerate; on a cluster, an image of yours built from it with the script added.
IMAGE = "huggingface/accelerate:gpu-release-1.15.0"
#: Machines without CUDA (the emulators) train on CPU; accelerate reads this flag.
CPU_ONLY = {"ACCELERATE_USE_CPU": "{{ '1' if params.emulated else '0' }}"}
#: Each training's rendezvous port. One port would do on real machines; on the emulators every
#: machine is this host, and two trainings at once must not listen on the same port.
PORTS = {"worker": 29500, "kubernetes": 29510, "batch": 29520}
ARGS = [
    "--epochs",
    "{{ params.epochs }}",
    "--checkpoint-dir",
    "{{ params.checkpoint_root }}/{{ run_id }}/{{ ti.task_id }}",
]


@dag(
    dag_id="accelerate_training",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-provider-gpu", "example", "training"],
    params={
        "epochs": Param(4, type="integer", minimum=1, maximum=100, title="Epochs"),
        "emulated": Param(False, type="boolean", title="Machines without CUDA (the local emulators)"),
        "checkpoint_root": Param("/tmp/airflow-gpu-checkpoints", type="string", title="Checkpoints under"),
    },
)
def accelerate_training() -> None:
    on_worker = AccelerateTrainOperator(
        task_id="train_on_worker",
        training_script=SCRIPT,
        script_args=ARGS,
        num_processes=2,
        main_process_port=PORTS["worker"],
    )
    on_kubernetes = AccelerateTrainOperator(
        task_id="train_on_kubernetes",
        target="kubernetes",
        training_script=SCRIPT,
        script_args=ARGS,
        accelerator="L4",
        image=IMAGE,
        num_machines=2,
        main_process_port=PORTS["kubernetes"],
        env=CPU_ONLY,
        namespace="default",
        capacity="on-demand",
        gpu_profile=True,
    )
    on_batch = AccelerateTrainOperator(
        task_id="train_on_batch",
        target="batch",
        training_script=SCRIPT,
        script_args=ARGS,
        accelerator="A10G",
        image=IMAGE,
        num_machines=2,
        main_process_port=PORTS["batch"],
        env=CPU_ONLY,
        job_queue="gpu-on-demand",
        poll_interval=1,
    )

    @task
    def report(worker: dict[str, Any], kubernetes: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
        """What each training printed: its ranks, the machines they ran on, the loss curve."""
        results = {"worker": worker, "kubernetes": kubernetes, "batch": batch}
        for where, result in results.items():
            losses = result["losses"]
            print(
                f"{where}: ranks {result['ranks']} on machines {result['machines']}, loss {losses[0]} -> {losses[-1]}"
            )
        return results

    report(worker=on_worker.output, kubernetes=on_kubernetes.output, batch=on_batch.output)


accelerate_training()

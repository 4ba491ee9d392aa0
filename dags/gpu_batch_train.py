"""Train on AWS Batch GPUs from one accelerator spec: ``image="auto"``, spot first, on-demand after.

What it shows:

* ``GPUBatchOperator`` with candidates in preference order (``A10G``, then ``L4``) and
  ``image="auto"``: the job definition (image, GPU/vCPU/memory, ``/dev/shm``) is built from the spec
  and registered once per content, and a GPU the queues cannot launch fails before submitting.
* ``job_queues`` with a spot and an on-demand queue and a ``SpotPolicy``: Batch itself retries a
  spot reclaim (up to ``max_interruptions``), then the task moves to the on-demand queue; a job
  stuck RUNNABLE without capacity past ``capacity_timeout`` is cancelled and the next candidate
  tried. Interruptions land in the task log and XCom ``gpu_interruptions``.
* A training loop that saves a checkpoint every epoch and on SIGTERM and resumes from it, so a
  reclaim costs at most one epoch. On a real account point ``CHECKPOINT_DIR`` at shared storage
  (EFS, FSx, or sync it to S3): a reclaimed attempt restarts on another instance.
* The job prints ``::airflow-gpu-result::<json>`` and that JSON is the task's return value, read by
  ``evaluate`` through XCom.

``make demo`` runs it against the local Batch emulator and reclaims its spot host once.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_gpu.operators.batch import GPUBatchOperator
from airflow_gpu.spot.policy import SpotPolicy

# Standard library only, so it runs in any Python image (and as a local process in the emulator).
TRAIN = """
import json, math, os, signal, sys, time
directory = os.environ["CHECKPOINT_DIR"]
os.makedirs(directory, exist_ok=True)
path = os.path.join(directory, "checkpoint.json")
state = json.load(open(path)) if os.path.exists(path) else {"epoch": 0, "loss": 2.5}
print(f"attempt {os.environ.get('AWS_BATCH_JOB_ATTEMPT')} on {os.environ['AIRFLOW_GPU_ACCELERATOR']}"
      f" ({os.environ['AIRFLOW_GPU_CAPACITY']}): resuming at epoch {state['epoch']}", flush=True)
def save(*_):
    json.dump(state, open(path, "w"))
def on_sigterm(*_):
    save()
    # os.write, not print: the signal may land inside the loop's own print ("reentrant call")
    os.write(1, f"SIGTERM: checkpoint saved at epoch {state['epoch']}\\n".encode())
    sys.exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
epochs = int(os.environ["EPOCHS"])
while state["epoch"] < epochs:
    time.sleep(0.3)  # one epoch of training
    state["epoch"] += 1
    state["loss"] = round(2.5 * math.exp(-0.15 * state["epoch"]), 4)
    save()
    print(f"epoch {state['epoch']}/{epochs} loss {state['loss']}", flush=True)
print("::airflow-gpu-result::" + json.dumps(state), flush=True)
"""

with DAG(
    "gpu_batch_train",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"epochs": 20},
    doc_md=__doc__,
    tags=["airflow-gpu", "aws-batch"],
):
    train = GPUBatchOperator(
        task_id="train",
        accelerator=["A10G", "L4"],
        image="auto",
        command=["python3", "-c", TRAIN],
        environment={"EPOCHS": "{{ params.epochs }}", "CHECKPOINT_DIR": "/tmp/airflow-gpu-checkpoints/{{ run_id }}"},
        job_queues={"spot": "gpu-spot", "on-demand": "gpu-on-demand"},
        spot=SpotPolicy(max_interruptions=2, capacity_timeout=600, grace_period_seconds=30),
        poll_interval=2,
        awslogs_fetch_interval=2,
    )

    @task
    def evaluate(metrics: dict[str, float]) -> dict[str, float]:
        """Refuse a model that did not learn: the loss must have come down."""
        if metrics["loss"] >= 1.0:
            raise ValueError(f"loss {metrics['loss']} after {metrics['epoch']} epochs: not good enough")
        return metrics

    evaluate(train.output)

"""GPUKubernetesOperator scenarios, one DAG each, run on the shared stack by
tests/e2e/test_gpu_kubernetes_operator.py (and one of them through ``airflow dags test``).

Each DAG talks to its own Kubernetes emulator, so that scenarios run side by side without seeing
each other's pods, faults or cordoned nodes: through the connection ``k8s_<dag_id>`` that the test
creates, or (two of them) through KPO's ``config_file`` set to ``dag_run.conf["kubeconfig"]``.
``dag_run.conf["workdir"]`` is where the workload keeps its checkpoint.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.spot.policy import SpotPolicy

# A training loop that checkpoints on SIGTERM and resumes from the checkpoint on the next pod. It
# prints every step, so that a test can preempt it once it has made progress, without a sleep. Where
# the scenario holds it (``dag_run.conf["hold"]``), each pod waits after its third step until the
# test's injector has done all it came for (``<workdir>/release``): a loaded machine's injector can
# never come after the pod has finished.
TRAIN = """
import json, os, signal, sys, time
path, hold = os.environ["CHECKPOINT_FILE"], os.environ.get("HOLD_FILE")
here = 0
state = json.load(open(path)) if os.path.exists(path) else {"step": 0, "total": 0}
print("resuming at step", state["step"], "attempt", os.environ["AIRFLOW_GPU_ATTEMPT"], flush=True)
def stop(*_):
    json.dump(state, open(path, "w"))
    notice = os.environ["AIRFLOW_GPU_SPOT_NOTICE_FILE"]
    # os.write, not print: the signal may land inside the loop's own print ("reentrant call")
    os.write(1, f"SIGTERM at step {state['step']} notice {os.path.exists(notice)}\\n".encode())
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while state["step"] < 30:
    state["step"] += 1
    state["total"] += state["step"]
    print("step", state["step"], flush=True)
    here += 1
    while hold and here >= 3 and not os.path.exists(hold):
        time.sleep(0.05)  # interval of a wait on the release file (observable state)
    # The step's work; 27 steps of 0.25 s after the third leave a loaded machine's injector seconds to act.
    time.sleep(0.25)  # the workload runs for a while; the test waits on its log lines, not on time
print("result", state["total"], flush=True)
"""
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def scenario(dag_id: str, deferrable: bool = False, config_file: bool = False, **operator: Any) -> DAG:
    """One DAG with one GPU task ``train`` against the emulator of connection ``k8s_<dag_id>``, or,
    with ``config_file``, of the kubeconfig file named by ``dag_run.conf["kubeconfig"]`` (KPO's
    ``config_file``, templated: the path reaches the hook, the client and the trigger)."""
    cluster = (
        {"config_file": "{{ dag_run.conf['kubeconfig'] }}", "in_cluster": False}
        if config_file
        else {"kubernetes_conn_id": f"k8s_{dag_id}"}
    )
    with DAG(dag_id, schedule=None, start_date=START, catchup=False, tags=["e2e-scenario"]) as dag:
        GPUKubernetesOperator(
            task_id="train", name="train", namespace="default", get_logs=True, poll_interval=1,
            deferrable=deferrable, **cluster,
            env_vars={
                "CHECKPOINT_FILE": "{{ dag_run.conf['workdir'] }}/checkpoint.json",
                "HOLD_FILE": "{{ dag_run.conf['workdir'] ~ '/release' if dag_run.conf.get('hold') else '' }}",
            },
            # A wrong retry shows as a second try within seconds, not as a run stuck for 5 minutes.
            retry_delay=timedelta(seconds=1), **operator,
        )  # fmt: skip
    return dag


def both_modes(dag_id: str, deferrable_config_file: bool = False, **operator: Any) -> None:
    scenario(dag_id, **operator)
    scenario(f"{dag_id}_deferrable", deferrable=True, config_file=deferrable_config_file, **operator)


TRAINING = {"cmds": [sys.executable, "-c", TRAIN]}

scenario(
    "gpu_kubernetes_single", accelerator="L4", image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    cmds=["sh", "-c", "echo accelerator=$AIRFLOW_GPU_ACCELERATOR capacity=$AIRFLOW_GPU_CAPACITY"],
)  # fmt: skip
both_modes(  # the deferrable one also runs through `airflow dags test`
    "gpu_kubernetes_preempt", deferrable_config_file=True, accelerator="H100:8", capacity="spot",
    spot=SpotPolicy(max_interruptions=3, grace_period_seconds=5), **TRAINING,
)  # fmt: skip
both_modes(  # the test deletes the first pod while it is still Pending
    "gpu_kubernetes_vanish", accelerator="H100:8", capacity="spot",
    cmds=["sh", "-c", "echo ran attempt $AIRFLOW_GPU_ATTEMPT"],
)  # fmt: skip
both_modes(
    "gpu_kubernetes_fallback", accelerator=["H100:8", "L4:4"], capacity="spot",
    spot=SpotPolicy(max_interruptions=0, capacity_timeout=3), **TRAINING,
)  # fmt: skip
scenario(  # the capacity summary reads the cluster through the client built from config_file
    "gpu_kubernetes_unschedulable", config_file=True, accelerator=["B200:8", "L4:2"], capacity="on-demand",
    spot=SpotPolicy(capacity_timeout=3), cmds=["sh", "-c", "echo ran on $AIRFLOW_GPU_ACCELERATOR"],
)  # fmt: skip
both_modes("gpu_kubernetes_app_failure", accelerator="L4", cmds=["sh", "-c", "echo boom; exit 7"], retries=2)
# Issue 12: what KPO users rely on, and reclaims told apart from everything else.
scenario(  # a result line that is not JSON: a bug, failed at once, the pod cleaned up all the same
    "gpu_kubernetes_bad_result", accelerator="L4", retries=2,
    cmds=["sh", "-c", "echo '::airflow-gpu-result::{not json'"],
)  # fmt: skip
scenario("gpu_kubernetes_skip", accelerator="L4", skip_on_exit_code=99, cmds=["sh", "-c", "exit 99"])
scenario(  # the test evicts the first pod for node pressure: moved, not a spot reclaim
    "gpu_kubernetes_node_pressure", accelerator="H100:8", capacity="spot",
    spot=SpotPolicy(max_interruptions=3, grace_period_seconds=5), **TRAINING,
)  # fmt: skip
scenario(  # the test deletes the first pod by hand: not resubmitted, Airflow's retry runs the task again
    "gpu_kubernetes_deleted", accelerator="H100:8", capacity="spot", retries=1,
    spot=SpotPolicy(max_interruptions=3, grace_period_seconds=5), **TRAINING,
)  # fmt: skip
both_modes(  # issue 25, behaviour 3: the test's emulator throttles, fails and drops the task's calls
    "gpu_kubernetes_transient", accelerator="L4", retries=2,
    cmds=["sh", "-c", "echo '::airflow-gpu-result::{\"ok\": true}'"],
)  # fmt: skip

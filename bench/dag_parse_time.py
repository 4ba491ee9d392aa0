"""Parse time of a DAG with 200 GPU tasks: GPUKubernetesOperator vs. plain KubernetesPodOperator.

The baseline writes the same 200 tasks with the official operator and hand-written resources,
tolerations and node affinity (what a user without this provider types). Both DAG files are
parsed in fresh interpreters that have already imported Airflow and the KPO module, so the figure
is what the DAG file itself costs the DAG processor on every parse. Medians over ``--runs``.

    python bench/dag_parse_time.py [--tasks 200] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = """
import pendulum
from airflow.sdk import DAG
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from kubernetes.client import models as k8s
"""

GPU_DAG = (
    HEADER
    + """
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
with DAG("bench_gpu", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    for i in range({tasks}):
        GPUKubernetesOperator(task_id=f"t{{i}}", accelerator="H100:8", capacity="spot", cpu=96,
                              memory="1024Gi", cmds=["python", "train.py"])
"""
)

KPO_DAG = (
    HEADER
    + """
with DAG("bench_kpo", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    for i in range({tasks}):
        KubernetesPodOperator(
            task_id=f"t{{i}}", image="pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime", cmds=["python", "train.py"],
            container_resources=k8s.V1ResourceRequirements(
                limits={{"nvidia.com/gpu": "8", "memory": "1024Gi"}},
                requests={{"nvidia.com/gpu": "8", "memory": "1024Gi", "cpu": "96"}}),
            tolerations=[{{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}},
                         {{"key": "karpenter.sh/capacity-type", "operator": "Equal", "value": "spot",
                           "effect": "NoSchedule"}}],
            affinity={{"nodeAffinity": {{"requiredDuringSchedulingIgnoredDuringExecution": {{"nodeSelectorTerms": [
                {{"matchExpressions": [
                    {{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}},
                    {{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}}]}}]}}}}}},
            volumes=[k8s.V1Volume(name="dshm",
                                  empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit="64Gi"))],
            volume_mounts=[k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm")],
        )
"""
)

PROBE = """
import runpy, sys, time
import airflow.providers.cncf.kubernetes.operators.pod  # both pay this; measured separately
start = time.perf_counter()
runpy.run_path(sys.argv[1])
print(time.perf_counter() - start)
"""


def parse_seconds(path: Path, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "AIRFLOW_HOME": scratch, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        files = {}
        for name, template in (("GPUKubernetesOperator", GPU_DAG), ("baseline: KubernetesPodOperator", KPO_DAG)):
            files[name] = Path(scratch) / f"{name.split()[-1]}.py"
            files[name].write_text(template.format(tasks=args.tasks))
        parse_seconds(files["GPUKubernetesOperator"], env)  # warm caches, create airflow.cfg
        results = {
            name: statistics.median(parse_seconds(path, env) for _ in range(args.runs)) for name, path in files.items()
        }
    print(
        f"DAG of {args.tasks} H100:8 spot tasks, median parse time of the DAG file over {args.runs} fresh interpreters"
    )
    for name, seconds in results.items():
        print(f"  {name:<34} {seconds:7.3f} s   {seconds / args.tasks * 1000:6.2f} ms per task")
    gpu, kpo = results["GPUKubernetesOperator"], results["baseline: KubernetesPodOperator"]
    print(f"  GPUKubernetesOperator / baseline   {gpu / kpo:7.2f}x")


if __name__ == "__main__":
    main()

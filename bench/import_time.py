"""What a DAG file pays to import the provider, beside what it pays for the official KPO.

The scheduler's DAG processor re-parses every DAG file every few seconds, so import time is a
running cost. Each figure is the median over fresh interpreters of the time spent inside the
import statement (interpreter start-up excluded), measured in the same run on the same machine.

    python bench/import_time.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CASES: dict[str, str] = {
    "import airflow_gpu": "import airflow_gpu",
    "airflow_gpu + Accelerator.parse('H100:8')": (
        "import airflow_gpu\nfrom airflow_gpu import Accelerator\nAccelerator.parse('H100:8')"
    ),
    "... + to_kubernetes() translation": (
        "from airflow_gpu import Accelerator\n"
        "from airflow_gpu.accelerators.kubernetes import to_kubernetes\n"
        "to_kubernetes(Accelerator.parse('H100:8'), capacity='spot')"
    ),
    "baseline: import airflow": "import airflow",
    "baseline: cncf KubernetesPodOperator module": "import airflow.providers.cncf.kubernetes.operators.pod",
}


def _time_once(code: str, env: dict[str, str]) -> float:
    probe = f"import time\n_t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
        _time_once("import airflow", env)  # warm the file-system cache and create airflow.cfg once
        results = {
            name: statistics.median(_time_once(code, env) for _ in range(args.runs)) for name, code in CASES.items()
        }
    kpo = results["baseline: cncf KubernetesPodOperator module"]
    print(f"median of {args.runs} fresh interpreters, seconds (lower is better)")
    for name, seconds in results.items():
        print(f"  {name:<48} {seconds:8.4f}   {seconds / kpo:7.1%} of the KPO module")


if __name__ == "__main__":
    main()

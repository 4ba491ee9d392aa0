"""A GPU profile whose every workload-given string is hostile, for the report pages' escaping test.

The GPU name comes from the "driver" (an emulated nvidia-smi reporting a ``<script>`` name), the
note from the profiler and the workload name from the task: the real entrypoint samples it, the
real reader takes its marker and ``build_profile`` makes the document, as on a GPU node. Only the
hop from pod or job to task is skipped: a plain task runs the wrapped command itself.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import dag, task

HOSTILE_GPU = "<script>alert('gpu')</script>"
HOSTILE_WORKLOAD = '"><img src=x onerror=alert(1)>'


@dag(dag_id="gpu_profile_hostile", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def gpu_profile_hostile() -> None:
    @task
    def profiled(ti: Any = None) -> None:
        from airflow_gpu.profiling.bundle import wrap
        from airflow_gpu.profiling.report import build_profile
        from airflow_gpu.testing.gpus import EmulatedGpu, install, with_devices
        from airflow_gpu.utils.results import PROFILE_XCOM_KEY, read_output

        device = EmulatedGpu(0, "GPU-0badc0de-0000-0000-0000-000000000000", HOSTILE_GPU, 24_000, 72.0)
        env = with_devices({**os.environ, "AIRFLOW_GPU_IMDS": "off"}, install([device], Path(tempfile.mkdtemp())))
        # The workload keeps its GPU busy for 1.5 s once the profiler's sampling nvidia-smi runs (its
        # ``--query-gpu`` process is in /proc): on a loaded machine the sampler can start a second
        # late, and a workload that began its 1.5 s before it left one sample, no series to draw.
        busy = (
            "import os, time\n"
            "def sampling():\n"
            "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "        try:\n"
            "            if b'--query-gpu' in open(f'/proc/{pid}/cmdline', 'rb').read(): return True\n"
            "        except OSError: pass\n"
            "    return False\n"
            "give_up = time.monotonic() + 120\n"
            "while not sampling() and time.monotonic() < give_up: time.sleep(0.05)\n"
            "end = time.monotonic() + 1.5\n"
            "while time.monotonic() < end: pass\n"
        )
        done = subprocess.run(wrap(["python3", "-c", busy], interval=0.2), env=env, capture_output=True, text=True)
        output = read_output(done.stdout.splitlines())
        assert output.profile is not None, (output.profile_warning, done.stdout[-2000:], done.stderr[-2000:])
        document = build_profile(
            output.profile, accelerator="L4", capacity="on-demand", backend="kubernetes",
            workload=HOSTILE_WORKLOAD, instance_type=None, interruptions=0, warning=None,
        )  # fmt: skip
        ti.xcom_push(key=PROFILE_XCOM_KEY, value=document)

    profiled()


gpu_profile_hostile()

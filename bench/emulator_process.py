"""The Kubernetes emulator in a process of its own, as every benchmark runs it, and the requests it counted.

``airflow-gpu emulate kubernetes`` serves the API with simulated containers (``simulated.local/...``:
no process per pod), so one machine holds thousands of pods, and its load is not the measured
process's. The request figures the benchmarks print are the emulator's own count
(``apiserver_request_total`` on ``/metrics``, which it does not count itself), never the client's.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from airflow_gpu.testing.polling import wait_for


def start(folder: Path, *options: str, timeout: float = 60) -> tuple[subprocess.Popen[bytes], Path, str]:
    """The emulator started with ``options`` (``--cluster FILE``, ``--scale NODES``); its kubeconfig and URL
    once it wrote the kubeconfig (it does when it serves)."""
    kubeconfig = folder / "kubeconfig"
    binary = Path(sys.executable).parent / "airflow-gpu"
    process = subprocess.Popen(
        [str(binary), "emulate", "kubernetes", *options, "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(kubeconfig.exists, timeout, "the emulator's kubeconfig")
    url = str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    return process, kubeconfig, url


def get(url: str, path: str) -> bytes:
    with urllib.request.urlopen(f"{url}{path}", timeout=60) as response:
        body: bytes = response.read()
        return body


def requests_served(url: str) -> int:
    """Every request the emulator counted (``apiserver_request_total``, summed; /metrics is not counted)."""
    text = get(url, "/metrics").decode()
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and not line.startswith("#"))

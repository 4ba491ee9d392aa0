"""``airflow-gpu emulate kubernetes``: serves, writes the kubeconfig, stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from kubernetes import client, config

from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for
from tests.testing.kubernetes.test_faults import _alive


def test_emulate_kubernetes_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kube" / "config"
    command = [
        str(Path(sys.executable).with_name("airflow-gpu")),
        "emulate",
        "kubernetes",
        "--kubeconfig",
        str(kubeconfig),
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert first.startswith("Kubernetes API emulator (demo cluster, 4 nodes) at http://127.0.0.1:")
        url = first.rsplit(" ", 1)[-1].strip()
        assert json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == url
        with urllib.request.urlopen(f"{url}/version", timeout=10) as response:
            assert json.loads(response.read())["major"] == "1"
        api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        api.create_namespaced_pod("default", pod_manifest("long", ["sleep", "300"]))
        pod = wait_for(phase_is(api, "long", "Running"))
        pid = int(pod.status.container_statuses[0].container_id.split("://")[1])
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        wait_for(lambda: not _alive(pid), timeout=10)
    finally:
        if server.poll() is None:
            server.kill()

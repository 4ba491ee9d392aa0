"""A try whose supervisor process really dies: no parent pid played, a process killed.

The other orphan tests play the supervisor's death by changing the parent pid the operator noted. Here a
real parent process (standing in for Airflow's task supervisor: it starts the task process in a session
and process group of its own, as the supervisor's ``setpgid`` does, and reads its output through a pipe)
is SIGKILLed while the task follows its running pod's log against the Kubernetes emulator; the pod then
says nothing more. The task process lives on, reparented; every log line it writes now fails on the broken
pipe, as a real orphan's does, but it writes none while the pod is silent. It must notice within seconds
(``orphaned_try.WatchedLogs``: KPO alone reads the pod again only when its five-minute log read times out),
and on the task's last try delete its pod and end, creating nothing. The one thing the child is told is that
a supervisor runs it (``task_runner.SUPERVISOR_COMMS``: a channel object, what ``utils.supervision`` asks).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for

# slow: two Python processes that import Airflow and the cncf-kubernetes provider (seconds of CPU each)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

TASK = """
import sys
from airflow.sdk.execution_time import task_runner

task_runner.SUPERVISOR_COMMS = object()  # a supervisor's channel, as far as utils.supervision asks
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from tests.operators.task_context import Store, Ti

# KPO logs a line of the pod's once the next one comes: the second echo makes the first one the task's log line
op = GPUKubernetesOperator(
    task_id="train", name="train", accelerator="L4", capacity="on-demand",
    cmds=["sh", "-c", "echo following-this-log; echo silent-from-here; sleep 600"],
    gpu_profile=False, namespace="default", kubernetes_conn_id=None, config_file=sys.argv[1],
    startup_check_interval_seconds=1,
)
try:
    op.execute({"ti": Ti(max_tries=0), "run_id": "manual__1", "dag": None, "task_state_store": Store()})
    outcome = "returned"
except BaseException as error:
    outcome = type(error).__name__
with open(sys.argv[2], "w") as out:
    out.write(outcome)
"""

#: The stand-in supervisor: the task in a session of its own, its output read through a pipe, its pid told.
SUPERVISOR = """
import signal, subprocess, sys
task = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
print(task.pid, flush=True)
for line in task.stdout:  # read as the supervisor reads the task's logs, until it is killed
    sys.stdout.buffer.write(line)  # and told on, for the test to see what the task logged
    sys.stdout.flush()
signal.pause()  # lives on as a supervisor does, until the test SIGKILLs it
"""


def alive(pid: int) -> bool:
    """Running: not gone (reaped by init), and not a zombie that no one has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.split(") ", 1)[1].split()[0] != "Z"


def test_a_task_process_whose_supervisor_was_killed_deletes_its_pod_on_its_last_try_and_ends(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    script, outcome = tmp_path / "task.py", tmp_path / "outcome"
    script.write_text(textwrap.dedent(TASK))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, sys.executable, str(script), str(kubernetes_emulator.kubeconfig_path),
         str(outcome)],
        stdout=subprocess.PIPE, env=environment, cwd=REPO,
    )  # fmt: skip
    try:
        assert supervisor.stdout is not None
        task = int(supervisor.stdout.readline())
        logged: list[bytes] = []
        threading.Thread(target=lambda: logged.extend(supervisor.stdout or ()), daemon=True).start()
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubernetes_emulator.kubeconfig_path)))
        following = lambda: any(b"following-this-log" in line for line in list(logged))  # noqa: E731
        wait_for(following, 120, "the task following its pod's log")
        supervisor.send_signal(signal.SIGKILL)  # the worker killed outright (SIGKILL, the OOM killer)
        supervisor.wait(10)
        # The pod is silent from here on: KPO alone would read it again only when its log read times out (300 s,
        # ``fetch_container_logs``); the watch beside the read shuts it within a second or two. The bound leaves
        # a loaded make test room, and stays well below KPO's.
        wait_for(lambda: not alive(task), 120, "the orphaned task process to end")
        assert outcome.read_text() in ("OrphanedTry", "BrokenPipeError")  # stopped, by its next poll or log line
        wait_for(lambda: not core.list_namespaced_pod("default").items, 60, "its pod deleted (and released)")
        assert len(kubernetes_emulator.pod_phase_times("default")) == 1  # nothing made again
    finally:
        supervisor.kill()
        supervisor.wait(10)
        with_pid = locals().get("task")
        if isinstance(with_pid, int) and alive(with_pid):
            os.kill(with_pid, signal.SIGKILL)

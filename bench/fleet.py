"""What the triggerer benchmarks share: the emulator in scale mode, deferred GPU pods, a triggerer process.

The emulator runs in a process of its own (``airflow-gpu emulate kubernetes --scale NODES``) with
simulated containers, so one machine holds 10,000 pods. Each measured "triggerer" is a fresh Python
process (``triggerer_process``) running one event loop of triggers, as Airflow's triggerer does, so
that its memory and CPU are its own and not the benchmark's; it reports on stdout in lines that
start with ``MARK``. Both trigger kinds get what a triggerer gives them: their own copy of the
kwargs (a triggerer deserializes each trigger from the database), the same pods, the same cluster.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

import emulator_process
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.triggers.pod_watch import WATCH_LABEL  # the label the shared watch selects on

POLL_INTERVAL = 2.0  # KubernetesPodTrigger's default, and what KubernetesPodOperator passes
MARK = "@@bench "
#: The dwell of ``triggers/resume_dwell.py`` (apache/airflow#72716) holds a GPU trigger's event until
#: 10 s after its deferral; the benchmarks defer their triggers this long ago so that it never counts.
DEFERRED_SECONDS_AGO = 3600


def start_emulator(folder: Path, nodes: int) -> tuple[subprocess.Popen[bytes], Path, str]:
    """The emulator with the scale cluster of ``nodes`` nodes, in its own process; its kubeconfig and URL."""
    return emulator_process.start(folder, "--scale", str(nodes), timeout=120)


def nodes_for(pods: int) -> int:
    """Scale-cluster nodes with GPUs enough for ``pods`` one-GPU pods (the fleet averages 4.8 GPUs
    a node), with room to spare."""
    return max(200, pods // 4)


def gpu_pod(name: str) -> dict[str, Any]:
    """A deferred GPU shard: one GPU, the GPU taint tolerated, the provider's label, running a day."""
    container = {
        "name": "base",
        "image": "simulated.local/trainer",
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4", "memory": "32Gi"}},
        "env": [{"name": "SIMULATED_SECONDS", "value": "86400"}],
    }
    return {
        "metadata": {"name": name, "labels": {WATCH_LABEL: "gpu"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def create_pods(kubeconfig: Path, names: list[str]) -> float:
    """Create the pods with the unmodified client and wait until all run; seconds it took."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    started = time.monotonic()
    for name in names:
        core.create_namespaced_pod("default", gpu_pod(name), _preload_content=False).drain_conn()  # reused
    wanted = set(names)

    def all_running() -> bool:
        response = core.list_namespaced_pod("default", label_selector=WATCH_LABEL, _preload_content=False)
        items = json.loads(response.data)["items"]
        return len(wanted & {p["metadata"]["name"] for p in items if p["status"]["phase"] == "Running"}) == len(wanted)

    wait_for(all_running, 600, f"{len(names)} pods Running", interval=1)
    return time.monotonic() - started


def finish(url: str, names: list[str]) -> None:
    """End the pods' simulated workloads now (``POST /_emulator/finish``): they go ``Succeeded``."""
    body = json.dumps({"namespace": "default", "pods": names}).encode()
    request = urllib.request.Request(f"{url}/_emulator/finish", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def succeeded_at(url: str) -> dict[str, float]:
    """When the emulator recorded each pod ``Succeeded`` (``time.time()``, to the microsecond)."""
    return {name: times[0] for name, times in succeeded_and_sent(url).items()}


def succeeded_and_sent(url: str) -> dict[str, tuple[float, float | None]]:
    """Per pod, when the emulator recorded it ``Succeeded`` and when a watch first wrote that to its
    client (None if none did): ``time.time()`` values of ``/_emulator/phase-times``."""
    pods = json.loads(emulator_process.get(url, "/_emulator/phase-times?namespace=default"))["pods"]
    return {
        p["name"]: (p["phases"]["Succeeded"], (p.get("sent") or {}).get("Succeeded"))
        for p in pods
        if "Succeeded" in p["phases"]
    }


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.99 for p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def machine() -> str:
    """The machine, and how busy it was: figures from a shared machine are read with its load."""
    import platform

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, load average {load}"


# --- the triggerer process -----------------------------------------------------------------------


def schedstat(pid: int | str = "self") -> tuple[float, float]:
    """Seconds a process has run on a CPU and seconds it waited, runnable, for one (``/proc/PID/schedstat``):
    on a loaded machine a process may get little CPU because it is not given more, not because it
    needs no more; the wait tells which."""
    try:
        ran, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


def rss_mib() -> float:
    """This process's resident memory now (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def report(**fields: Any) -> None:
    """One line to the benchmark (stdout may carry other output; only these lines are read)."""
    print(MARK + json.dumps(fields), flush=True)


def make_triggers(kind: str, names: list[str], kubeconfig: Path) -> list[Any]:
    """One trigger per pod, as ``KubernetesPodOperator`` / ``GPUKubernetesOperator`` defer them, each
    with its own kwargs; deferred an hour ago (see ``DEFERRED_SECONDS_AGO``)."""
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    from airflow_gpu.triggers.kubernetes import GPUPodTrigger

    config_dict = yaml.safe_load(kubeconfig.read_text())
    deferred_at = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=DEFERRED_SECONDS_AGO)
    made: list[Any] = []
    for name in names:
        official = KubernetesPodTrigger(
            pod_name=name, pod_namespace="default", trigger_start_time=deferred_at, base_container_name="base",
            kubernetes_conn_id=None, config_dict=copy.deepcopy(config_dict), poll_interval=POLL_INTERVAL,
            get_logs=False,
        )  # fmt: skip
        made.append(official if kind == "official" else GPUPodTrigger.from_official(official))
    return made


async def first_event(trigger: Any) -> tuple[dict[str, Any], float]:
    """The trigger's event and the time it was yielded, as the triggerer takes it."""
    async for event in trigger.run():
        return dict(event.payload), time.time()
    raise RuntimeError("the trigger ended without an event")


def shared_watches_ready(count: int) -> bool:
    """Whether ``count`` pods are waited on through this loop's shared watches, each with a known state."""
    from airflow_gpu.triggers.pod_watch import SharedPodWatch

    watches = SharedPodWatch.in_this_loop()
    waited = sum(len(w.waiters) for w in watches)
    known = all(w.synced.is_set() and all(name in w.states for name in w.waiters) for w in watches)
    return bool(watches) and known and waited == count


async def settle(kind: str, names: list[str], polls: PollClock | None = None, timeout: float = 300) -> bool:
    """Until every trigger waits for its pod's end (False if ``timeout`` came first): ours once the
    shared watch knows every pod; the official ones once each has read its pod three times (two
    reads to start, then its first poll)."""
    deadline = time.monotonic() + timeout
    while not (shared_watches_ready(len(names)) if polls is None else polls.polling(names)):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


class PollClock:
    """When each ``KubernetesPodTrigger`` read its pod while polling (``_get_pod``), to tell how late
    its polls come: a poll interval of 2 s promises a read every 2 s plus the read itself."""

    def __init__(self) -> None:
        from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

        self.reads: dict[str, list[float]] = {}
        original = KubernetesPodTrigger._get_pod

        async def timed(trigger: Any) -> Any:
            self.reads.setdefault(trigger.pod_name, []).append(time.monotonic())
            return await original(trigger)

        KubernetesPodTrigger._get_pod = timed  # type: ignore[method-assign,assignment]

    def polling(self, names: list[str]) -> bool:
        """Whether every pod's trigger is in its poll loop (``_wait_for_pod_start`` reads twice)."""
        return all(len(self.reads.get(name, ())) >= 3 for name in names)

    def gaps(self, names: list[str], start: float, end: float) -> list[float]:
        """Every gap between reads of a pod within [start, end], the open ones at its edges included
        (a pod not read at all in it counts the whole window)."""
        gaps = []
        for name in names:
            reads = [t for t in self.reads.get(name, []) if start <= t <= end]
            edges = [start, *reads, end]
            gaps += [later - earlier for earlier, later in itertools.pairwise(edges) if later > earlier]
        return gaps


class WatchClock:
    """When the shared watch of this process first recorded each pod ended (``SharedPodWatch._record``,
    once its line of the stream was read and decoded): where the emulator's part of a latency ends and
    the triggerer's begins. Adds a dict lookup per recorded state."""

    def __init__(self) -> None:
        from airflow_gpu.triggers.pod_watch import SharedPodWatch, ended

        self.read: dict[str, float] = {}
        original = SharedPodWatch._record
        read = self.read

        async def timed(watch: Any, name: str, pod: dict[str, Any] | None, deleted: bool = False) -> None:
            if name not in read and pod is not None and ended(pod):
                read[name] = time.time()
            await original(watch, name, pod, deleted)

        SharedPodWatch._record = timed  # type: ignore[method-assign,assignment]


class LoopLag:
    """How late the event loop wakes a 100 ms sleeper: what a trigger waiting on a timer feels."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.samples = []
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.1)
            self.samples.append(time.monotonic() - before - 0.1)

    def stop(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
        samples = self.samples or [0.0]
        return {"lag_p99_s": percentile(samples, 0.99), "lag_max_s": max(samples)}


def read_marks(process: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    """The child's reports, as they come."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(MARK):
            yield json.loads(line[len(MARK) :])


def child(script: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``script`` as a triggerer process: quiet Airflow logging, reports on stdout, the rest
    (a traceback) in ``log``; its stdin is a pipe the benchmark may speak on."""
    env = {**os.environ, "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR", "PYTHONUNBUFFERED": "1"}
    with log.open("a") as errors:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, env=env,
        )  # fmt: skip


def ended_badly(process: subprocess.Popen[str], log: Path) -> str:
    """What to say when a triggerer process stopped before reporting all it should."""
    code = process.wait(60)
    tail = "\n".join(log.read_text().splitlines()[-15:]) if log.exists() else ""
    return f"the triggerer process exited with {code}:\n{tail}"

"""Seconds from a spot preemption until the GPU task is Running again: ours next to Airflow's retry.

Ours: ``GPUKubernetesOperator`` / ``GPUBatchOperator``, which replace a preempted pod, or let
Batch retry a reclaimed job, inside the same task try. Baseline, in the same run: the official
``KubernetesPodOperator`` / ``BatchOperator`` with ``retries=1`` and Airflow's default
``retry_delay`` (``[core] default_task_retry_delay``, read from Airflow's config), which is what a
user gets today. Sync and deferrable, on Kubernetes and AWS Batch: 8 measurements, all at once on
one real Airflow (api-server, scheduler, dag-processor, triggerer, LocalExecutor), each task
against an emulator of its own (bench/spot_recovery_dags.py).

Each task's workload prints progress and then holds. Once it holds (its pod log; on Batch the
attempt's CloudWatch stream) and the task waits on it as it would hours into a run (sync: the
worker; deferrable: the trigger has started, its log says so), the bench preempts it
(``KubernetesEmulator.preempt``, a graceful node shutdown; ``BatchEmulator.reclaim``, a spot host
terminated) and measures, on the clock of this process, which hosts the emulators: from the
preemption to the moment a replacement is Running (Kubernetes: a new pod with phase Running, seen
through a watch; Batch: a new attempt or a new job RUNNING, read from the emulator every 50 ms).
The goal printed beside: ours Running again within the policy's grace period + 2 s.

    python bench/spot_recovery.py            # about 6 minutes: the baseline waits out 300 s
    python bench/spot_recovery.py --quick    # baseline retry_delay 5 s: for working on this script
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.batch.compute import LOG_GROUP
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for

DAGS_FILE = Path(__file__).resolve().parent / "spot_recovery_dags.py"
QUICK_RETRY_DELAY = 5
#: How long the first run may take to start and make progress (8 tasks start at once on a small machine).
START_TIMEOUT = 300.0
#: Beyond the baseline's retry_delay, how long a replacement may take to be Running.
RECOVERY_MARGIN = 300.0
PACKAGES = (
    "apache-airflow",
    "apache-airflow-providers-cncf-kubernetes",
    "apache-airflow-providers-amazon",
    "airflow-provider-gpu",
    "moto",
)


@dataclass
class Case:
    """One measurement: a DAG, its emulator, and what happened."""

    who: str
    backend: str
    mode: str
    dag_id: str
    emulator: Any
    workdir: Path
    run_id: str = ""
    preempted: str = ""
    replacement: str = ""
    seconds: float | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.who}/{self.backend}/{self.mode}"


class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def log(self, message: str) -> None:
        print(f"  {time.monotonic() - self.start:6.1f}s  {message}", flush=True)


# --- Kubernetes -------------------------------------------------------------------------------


def _core_api(emulator: KubernetesEmulator) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))


def _holding_pod(api: Any) -> str | None:
    """A Running pod whose workload says it holds (its log, raw: the client's decoding mangles it)."""
    for pod in api.list_namespaced_pod("default").items:
        if pod.status.phase != "Running":
            continue
        log = api.read_namespaced_pod_log(pod.metadata.name, "default", _preload_content=False).data.decode()
        if "holding" in log.splitlines():
            return str(pod.metadata.name)
    return None


def _watch_for_running(api: Any, since: str, known: set[str], seen: list[tuple[float, str]], deadline: float) -> None:
    """Append when (and where) a pod not in ``known`` is first seen Running (events from ``since`` on)."""
    from kubernetes import watch

    version = since
    while time.monotonic() < deadline:
        stream = watch.Watch()
        timeout = max(1, min(30, int(deadline - time.monotonic())))
        for event in stream.stream(
            api.list_namespaced_pod, "default", resource_version=version, timeout_seconds=timeout
        ):
            obj = event["raw_object"]
            if obj["metadata"]["name"] not in known and (obj.get("status") or {}).get("phase") == "Running":
                seen.append((time.time(), f"pod {obj['metadata']['name']} on {obj['spec'].get('nodeName')}"))
                stream.stop()
                return
        version = stream.resource_version or version


def measure_kubernetes(case: Case, steady: Callable[[], object], recovery_timeout: float, clock: Clock) -> None:
    api = _core_api(case.emulator)
    pod = wait_for(lambda: _holding_pod(api), START_TIMEOUT, f"{case.label}: the first pod to hold", interval=0.1)
    wait_for(steady, START_TIMEOUT, f"{case.label}: the task to wait on its pod", interval=0.2)
    listing = api.list_namespaced_pod("default")
    known = {p.metadata.name for p in listing.items}
    seen: list[tuple[float, str]] = []
    deadline = time.monotonic() + recovery_timeout
    watcher = threading.Thread(
        target=_watch_for_running, args=(api, listing.metadata.resource_version, known, seen, deadline), daemon=True
    )
    watcher.start()
    node = api.read_namespaced_pod(pod, "default").spec.node_name
    case.preempted = f"pod {pod} on {node}"
    clock.log(f"{case.label}: preempting pod {pod}")
    preempted_at = time.time()
    case.emulator.preempt(pod)  # returns once the pod is Failed (SIGTERM, the workload exits)
    watcher.join(max(deadline - time.monotonic(), 0) + 5)
    if not seen:
        raise TimeoutError(f"no replacement pod Running within {recovery_timeout:g} s")
    running_at, case.replacement = seen[0]
    case.seconds = running_at - preempted_at


# --- AWS Batch --------------------------------------------------------------------------------


def _holding_job(emulator: BatchEmulator, logs: Any) -> Any:
    """A RUNNING job whose current attempt's CloudWatch stream says it holds."""
    for job in emulator.jobs():
        if job.status != "RUNNING" or not job.log_stream_name:
            continue
        events = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=job.log_stream_name, startFromHead=True)
        if any(e["message"] == "holding" for e in events["events"]):
            return job
    return None


def measure_batch(case: Case, steady: Callable[[], object], recovery_timeout: float, clock: Clock) -> None:
    emulator: BatchEmulator = case.emulator
    logs = emulator.client("logs")
    job = wait_for(
        lambda: _holding_job(emulator, logs), START_TIMEOUT, f"{case.label}: the first job to hold", interval=0.2
    )
    wait_for(steady, START_TIMEOUT, f"{case.label}: the task to wait on its job", interval=0.2)
    reclaimed = (job.job_id, len(job.attempts))

    def running_again() -> tuple[float, str] | None:
        """A job of the task RUNNING in another attempt than the reclaimed one (the same job's next, or a new job)."""
        for other in emulator.jobs():
            if other.status == "RUNNING" and (other.job_id, len(other.attempts)) != reclaimed:
                return time.time(), f"job {other.job_id[:8]} attempt {len(other.attempts)}"
        return None

    case.preempted = f"job {job.job_id[:8]} attempt {reclaimed[1]}"
    clock.log(f"{case.label}: reclaiming the host of {case.preempted}")
    reclaimed_at = time.time()
    emulator.reclaim(job.job_id)
    running_at, case.replacement = wait_for(
        running_again, recovery_timeout, f"{case.label}: a replacement RUNNING", interval=0.05
    )
    case.seconds = running_at - reclaimed_at


# --- the run ----------------------------------------------------------------------------------


def trigger_started(stack: AirflowStack, case: Case) -> bool:
    """The task is DEFERRED and the triggerer has started its current trigger (the trigger's log says so).

    A trigger starts a few seconds after its task defers (the triggerer claims it, then imports and
    starts it). Preempting before that would add the trigger's start-up to the figure, which a task
    preempted hours into its run does not pay; and the sooner a trigger fires after its deferral,
    the likelier apache/airflow#72716 (``stale_event``) fails the resumed task."""
    ti = stack.request("GET", f"/api/v2/dags/{case.dag_id}/dagRuns/{case.run_id}/taskInstances/train")
    trigger = ti.get("trigger")
    if ti["state"] != "deferred" or not trigger:
        return False
    started = f"(ID {trigger['id']}) starting"
    folder = stack.home / "logs" / f"dag_id={case.dag_id}" / f"run_id={case.run_id}" / "task_id=train"
    return any(started in log.read_text() for log in folder.glob(f"attempt={ti['try_number']}.log.trigger.*.log"))


def measure(case: Case, stack: AirflowStack, recovery_timeout: float, clock: Clock) -> None:
    """Preempt the task's first run once its workload holds and the task waits on it (the worker,
    or the started trigger); time the replacement; then, once the task waits on the replacement
    the same way, let the replacement finish."""

    def steady() -> bool:
        return case.mode == "sync" or trigger_started(stack, case)

    try:
        measurer = measure_kubernetes if case.backend == "kubernetes" else measure_batch
        measurer(case, steady, recovery_timeout, clock)
        clock.log(f"{case.label}: running again after {case.seconds:.1f} s")
        with contextlib.suppress(TimeoutError):
            wait_for(steady, START_TIMEOUT, interval=0.2)
    except Exception as error:  # reported in the table; the other measurements go on
        case.error = f"{type(error).__name__}: {error}"
        clock.log(f"{case.label}: FAILED: {case.error}")
    finally:
        (case.workdir / "release").touch()  # the replacement (or what is left) finishes


def connect(stack: AirflowStack, case: Case) -> None:
    """The DAG's connection, created through the REST API as an admin would."""
    if case.backend == "kubernetes":
        body: dict[str, Any] = {
            "conn_type": "kubernetes",
            "extra": json.dumps({"kube_config_path": str(case.emulator.kubeconfig_path)}),
        }
        connection_id = f"k8s_{case.dag_id}"
    else:
        aws = case.emulator.airflow_connection()
        body = {**{k: aws[k] for k in ("conn_type", "login", "password")}, "extra": json.dumps(aws["extra"])}
        connection_id = f"aws_{case.dag_id}"
    try:
        stack.request("POST", "/api/v2/connections", {"connection_id": connection_id, **body})
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"creating {connection_id}: {error.read().decode()[:500]}") from error


def register_baseline_definition(emulator: BatchEmulator, name: str, resources: dict[str, str]) -> None:
    """The baseline's job definition, as a user registers it: no retryStrategy (a reclaim fails the job)."""
    emulator.client("batch").register_job_definition(
        jobDefinitionName=name,
        type="container",
        containerProperties={
            "image": "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime",
            "command": ["true"],
            "resourceRequirements": [{"type": k, "value": v} for k, v in resources.items()],
        },
    )


def ended(stack: AirflowStack, case: Case, timeout: float = 180) -> str:
    """The run's final state (waited for) and the state of each try of its task."""

    def finished() -> bool:
        return stack.run_state(case.dag_id, case.run_id) in ("success", "failed")

    with contextlib.suppress(TimeoutError):
        wait_for(finished, timeout, interval=1)
    path = f"/api/v2/dags/{case.dag_id}/dagRuns/{case.run_id}/taskInstances/train/tries"
    found = sorted(stack.request("GET", path)["task_instances"], key=lambda t: t["try_number"])
    tries = ", ".join(f"{t['try_number']} {t['state']}" for t in found)
    state = stack.run_state(case.dag_id, case.run_id)
    if state == "failed" and stale_event(stack, case):
        tries += "; the last one failed by the scheduler, apache/airflow#72716"
    return f"{state} (tries: {tries})"


#: The scheduler's line when it takes the executor's late "success" of a worker that exited on
#: ``defer()`` for a task killed externally, and fails the resumed task: apache/airflow#72716, in
#: Airflow 3.3.2 (fixed upstream by #72767). It comes after the figures are taken.
STALE_EVENT = "finished with state success, but the task instance's state attribute is running"


def stale_event(stack: AirflowStack, case: Case) -> bool:
    log = stack.home / "logs" / "scheduler.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return any(f"<TaskInstance: {case.dag_id}.train " in line and STALE_EVENT in line for line in text.splitlines())


def versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    where = f"{os.cpu_count()} cores" + (f" ({model})" if model else "")
    return f"{where}, {platform.system()} {platform.machine()}, load average {load} (1, 5, 15 min) at the end"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"baseline retry_delay {QUICK_RETRY_DELAY} s instead of Airflow's default (for developing the script)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (Airflow home, logs)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the stack and emulators on a kill too
    scratch = Path(tempfile.mkdtemp(prefix="spot-recovery-"))
    try:
        return run(scratch, args.quick)
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run(root: Path, quick: bool) -> int:
    # Importing Airflow here (for its config and the DAGs' constants) must not create ~/airflow.
    os.environ["AIRFLOW_HOME"] = str(root / "bench-airflow-home")
    extra_env = {"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600"}  # parse the DAG file once
    if quick:
        extra_env["AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY"] = os.environ["AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY"] = (
            str(QUICK_RETRY_DELAY)
        )
    from airflow.configuration import conf

    import spot_recovery_dags as dags

    configured = conf.getint("core", "default_task_retry_delay")
    shipped = int(conf.get_default_value("core", "default_task_retry_delay"))
    # What the baseline tasks got: they leave retry_delay to Airflow, which takes it from the config.
    delays = {
        dags.DAGS[dags.dag_id("baseline", b, m)].get_task("train").retry_delay.total_seconds()
        for b in dags.BACKENDS
        for m in dags.MODES
    }
    if delays != {configured}:
        raise RuntimeError(f"the baseline tasks' retry_delay {delays} is not the config's {configured} s")
    retry_delay = configured
    clock = Clock()
    print("Spot recovery: seconds from a preemption until the GPU task is Running again", flush=True)
    cases: list[Case] = []
    with contextlib.ExitStack() as exits:
        for who in dags.WHO:
            for backend in dags.BACKENDS:
                for mode in dags.MODES:
                    dag_id = dags.dag_id(who, backend, mode)
                    workdir = root / "work" / dag_id
                    workdir.mkdir(parents=True)
                    if backend == "kubernetes":
                        emulator: Any = exits.enter_context(KubernetesEmulator("demo"))
                        emulator.write_kubeconfig(root / f"{dag_id}.kubeconfig")
                    else:
                        emulator = exits.enter_context(BatchEmulator(stop_timeout=dags.GRACE_SECONDS))
                        if who == "baseline":
                            register_baseline_definition(emulator, dags.BASELINE_JOB_DEFINITION, dags.H100_8)
                    cases.append(Case(who, backend, mode, dag_id, emulator, workdir))
        dags_folder = root / "dags"
        dags_folder.mkdir()
        shutil.copy(DAGS_FILE, dags_folder)
        stack = AirflowStack(root / "airflow-home", dags_folder, parallelism=len(cases), extra_env=extra_env)
        clock.log(f"8 emulators up; starting Airflow (parallelism {len(cases)})")
        exits.enter_context(stack)
        for case in cases:
            connect(stack, case)
        for case in cases:
            stack.wait_for_dag(case.dag_id)
        for case in cases:
            case.run_id = stack.trigger(case.dag_id, {"workdir": str(case.workdir)})
        clock.log("8 runs triggered")
        recovery_timeout = retry_delay + RECOVERY_MARGIN
        threads = [
            threading.Thread(target=measure, args=(c, stack, recovery_timeout, clock), daemon=True) for c in cases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        states = {case.dag_id: ended(stack, case) for case in cases}
        clock.log("all runs ended; stopping Airflow and the emulators")
    report(cases, states, retry_delay, shipped, quick, dags.GRACE_SECONDS, dags.POLL_INTERVAL, clock)
    return 0 if all(c.seconds is not None for c in cases) else 1


def report(
    cases: list[Case],
    states: dict[str, str],
    retry_delay: int,
    shipped: int,
    quick: bool,
    grace: int,
    poll_interval: int,
    clock: Clock,
) -> None:
    goal = grace + 2
    by_key = {(c.who, c.backend, c.mode): c for c in cases}
    if quick:
        delay = f"retry_delay={retry_delay} s (--quick: NOT Airflow's default of {shipped} s)"
    elif retry_delay == shipped:
        delay = f"retry_delay={retry_delay} s (Airflow's default, [core] default_task_retry_delay)"
    else:
        delay = f"retry_delay={retry_delay} s (from this environment's config; Airflow's default is {shipped} s)"
    print()
    print(f"Versions: {versions()}; Python {platform.python_version()}")
    print(f"Machine: {machine()}")
    print(f"Ours: GPUKubernetesOperator / GPUBatchOperator, SpotPolicy(grace_period_seconds={grace}), retries=1")
    print(f"Baseline: KubernetesPodOperator / BatchOperator, retries=1, {delay}")
    print(
        f"Both: H100:8 on spot, termination grace {grace} s (pod terminationGracePeriodSeconds; Batch: the"
        f" emulator's SIGTERM-to-SIGKILL stop timeout), poll_interval={poll_interval} s; the workload exits on SIGTERM"
    )
    print(f"Goal: ours Running again within the grace period + 2 s = {goal} s")
    print(
        "Not in the figures, on either side: the emulators start a replacement at once (no node or instance to"
        " provision, no image to pull)"
    )
    print()
    print(f"{'backend':<12}{'mode':<12}{'ours (s)':>10}{'baseline (s)':>14}   goal (<= {goal} s) met")
    for backend in ("kubernetes", "batch"):
        for mode in ("sync", "deferrable"):
            ours, baseline = by_key[("ours", backend, mode)], by_key[("baseline", backend, mode)]
            met = "n/a" if ours.seconds is None else ("yes" if ours.seconds <= goal else "no")
            print(f"{backend:<12}{mode:<12}{_seconds(ours):>10}{_seconds(baseline):>14}   {met}")
    print()
    print("Each run (its end state does not enter its figure, taken when the replacement was Running):")
    for case in cases:
        outcome = f"error: {case.error}" if case.error else f"{case.preempted} -> {case.replacement}"
        print(f"  {case.label:<30} {outcome}; run {states.get(case.dag_id, '?')}")
    print(f"({time.monotonic() - clock.start:.0f} s in all)")


def _seconds(case: Case) -> str:
    return "n/a" if case.seconds is None else f"{case.seconds:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())

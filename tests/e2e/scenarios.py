"""Scenario runs on the shared Airflow stack, all under way at once.

A scenario is one DAG of ``tests/e2e/stack_dags`` with its own emulator (Kubernetes or AWS Batch),
what the test does to that emulator before the run (cordon nodes, stall a compute environment,
register a job definition) and a fault injector that works on it during the run (preempt a pod,
reclaim a spot host). When the first end-to-end test starts, every scenario the selected tests
name is launched: an emulator each, a connection each (created through the REST API, as an admin
would), the injectors started and the runs triggered. Each test then waits for its own run to end
and asserts over the whole of it: the task instances and their tries, XCom, the task's log (and
its trigger's), and everything the emulator saw.

Why: a run through ``airflow dags test`` pays ~15 s of Airflow start-up, one after the other. Here
the runs share one scheduler, triggerer and LocalExecutor and overlap, and they take the
production path: a real worker process per try and a real triggerer for deferrable tasks.

A launch that fails (a DAG that does not parse, an emulator that does not start) fails every
end-to-end test of the session: they share the stack, and the error names the scenario.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.polling import wait_for

Backend = Literal["kubernetes", "batch", "shared"]
T = TypeVar("T")
FINISHED = ("success", "failed")
STACK_DAGS = Path(__file__).resolve().parent / "stack_dags"  # the scenario DAGs, beside the lifecycle ones


class Injector(threading.Thread):
    """A fault injector: works on one scenario's emulator from the trigger to the run's end.

    ``bind`` gives it the emulator and the run before it starts; ``inject`` polls the emulator's
    API (or the run's log) for the state it waits for and returns once ``stop`` is set.

    ``outlives_the_run``: what it injects ends the run (a person's "Mark Failed" fails the run at
    once), and what it then waits for (the pod's deletion, the job's termination) follows later,
    from the killed task's ``on_kill``. The scenario's wait lets such an injector finish by itself
    once the run has ended, instead of stopping it (and then the emulator) under that cleanup."""

    outlives_the_run: ClassVar[bool] = False
    emulator: Any
    scenario_run: ScenarioRun

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def bind(self, emulator: Any, scenario_run: ScenarioRun) -> Injector:
        self.emulator, self.scenario_run = emulator, scenario_run
        return self

    def run(self) -> None:
        try:
            self.inject()
        except BaseException as error:  # surfaced by ScenarioRun.wait, never lost in a thread
            self.error = error

    def inject(self) -> None:  # pragma: no cover - every injector overrides it
        raise RuntimeError(f"{type(self).__name__} does not inject anything")

    def until(self, probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
        """``wait_for`` that gives up as soon as the scenario's wait does (``stop``)."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            self.stop.wait(interval)
        raise TimeoutError(f"{type(self).__name__}: stopped or timed out after {timeout:g} s waiting for {what}")


class ReleaseAfterDeferral(Injector):
    """Lets an official operator's deferrable scenario end its workload only once the deferral is over
    on both sides: the task is DEFERRED, and the scheduler has taken the executor's event for the
    worker that deferred it (its log says so).

    Both halves are Airflow's. The official ``BatchOperator`` checks the job once before deferring
    and does not defer if it has already ended. And in Airflow 3.3.2 a trigger that fires before the
    scheduler has drained that executor event makes the scheduler fail the resumed try
    (apache/airflow#72716, fix not released): the provider's own triggers hold their event for a
    few seconds for it (``triggers.resume_dwell``), the official ones do not. The scenario's DAG has
    its workload wait for the file ``<workdir>/released``."""

    def inject(self) -> None:
        run, key = self.scenario_run, f"TaskInstanceKey(dag_id='{self.scenario_run.dag_id}'"
        # The triggerer runs a trigger only once its task is DEFERRED (one transaction sets both), and
        # writes its log file when it starts it: a file to look for, not the API server's costliest
        # read (the task-instance list) polled for the minute the task may queue behind the others.
        self.until(run.trigger_started, 300, "the deferral", interval=0.5)
        log = SchedulerLog(run.stack.home / "logs" / "scheduler.log")
        self.until(
            lambda: any(
                "Received executor event with state success" in line and key in line and "try_number=1" in line
                for line in log.new_lines()
            ),
            120,
            "the scheduler to take the deferring worker's executor event",
        )
        (run.workdir / "released").touch()


class SchedulerLog:
    """The lines the scheduler's log gained since the last read: the log grows to megabytes in a run,
    and reading it whole three times a second was a visible part of the suite's CPU."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new_lines(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written is read whole next time
        self.offset += end
        return chunk[:end].decode(errors="replace").splitlines()


class PodWatch(threading.Thread):
    """Every change to every pod of a Kubernetes scenario, as a watch through the API sees it.

    Cleanup deletes the pods, so "never two pods of one task try alive at once" can only be
    checked over the whole run: each event is kept with the pod's phase, labels and deletion mark.
    """

    def __init__(self, emulator: Any) -> None:
        super().__init__(daemon=True)
        from kubernetes import client, config

        self.api = client.CoreV1Api(config.new_client_from_config(str(emulator.kubeconfig_path)))
        self.stop = threading.Event()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from kubernetes import watch

        try:
            version = self.api.list_namespaced_pod("default").metadata.resource_version
            while not self.stop.is_set():
                stream = watch.Watch().stream(
                    self.api.list_namespaced_pod, "default", resource_version=version, timeout_seconds=1
                )
                for event in stream:
                    pod = self.api.api_client.sanitize_for_serialization(event["object"])
                    self.events.append((event["type"], pod))
                    version = pod["metadata"]["resourceVersion"]
        except BaseException as error:  # surfaced by the test that reads the history
            self.error = error

    def overlaps(self) -> list[tuple[str, str]]:
        """Pairs of pods of one task try (and map index) that were alive (not ended, not gone) together."""
        alive: dict[str, tuple[str, ...]] = {}
        found: set[tuple[str, str]] = set()
        for kind, pod in self.events:
            name, labels = pod["metadata"]["name"], pod["metadata"].get("labels") or {}
            phase = (pod.get("status") or {}).get("phase")
            if kind == "DELETED" or phase in ("Succeeded", "Failed"):
                alive.pop(name, None)
                continue
            key = tuple(labels.get(k, "") for k in ("dag_id", "task_id", "run_id", "map_index", "try_number"))
            found |= {(min(o, name), max(o, name)) for o, o_key in alive.items() if o_key == key and o != name}
            alive[name] = key
        if self.error is not None:
            raise self.error
        return sorted(found)


@dataclass(frozen=True)
class Scenario:
    """One DAG run (or ``runs`` runs: the DAG's ``max_active_runs`` says whether they overlap) against
    an emulator of its own, with ``conf`` added to the run's ``dag_run.conf``. Backend ``shared``: the
    stack's own ``kubernetes_default`` and ``aws_default`` emulators (an example DAG as shipped); the
    run's ``emulator`` is then ``{"kubernetes": ..., "batch": ...}``, never stopped by the scenario."""

    dag_id: str
    backend: Backend
    prepare: Callable[[Any], None] | None = None
    injector: Callable[[], Injector] | None = None
    runs: int = 1
    conf: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def connection_id(self) -> str:
        return f"{'k8s' if self.backend == 'kubernetes' else 'aws'}_{self.dag_id}"


def scenarios(*items: Scenario, ids: Sequence[str] | None = None) -> pytest.MarkDecorator:
    """Parametrize a test over scenarios; it receives each one's run as the ``scenario_run`` fixture."""
    return pytest.mark.parametrize("scenario_run", list(items), ids=ids or [s.dag_id for s in items], indirect=True)


@dataclass
class ScenarioRun:
    scenario: Scenario
    stack: AirflowStack
    emulator: Any
    workdir: Path
    injector: Injector | None = None
    run_ids: list[str] = field(default_factory=list)
    pods: PodWatch | None = None

    @property
    def dag_id(self) -> str:
        return self.scenario.dag_id

    @property
    def run_id(self) -> str:
        return self.run_ids[0]

    def wait(self, timeout: float = 300) -> ScenarioRun:
        """Until every run of the scenario has ended; then the injector stops (one that
        ``outlives_the_run`` first gets ``timeout`` to finish by itself). An injector that failed,
        or did not stop, fails the test (also when the run did not end in time)."""
        ended = False
        try:
            for run_id in self.run_ids:
                wait_for(
                    lambda run_id=run_id: self.state(run_id) in FINISHED,
                    timeout,
                    f"{self.dag_id} {run_id} to end",
                    interval=0.5,
                )
            ended = True
        except TimeoutError as timeout_error:
            if self.injector is not None and self.injector.error is not None:
                raise timeout_error from self.injector.error
            raise
        finally:
            if self.injector is not None:
                if ended and self.injector.outlives_the_run:  # its own waits are bounded
                    self.injector.join(timeout=timeout)
                self.injector.stop.set()
                self.injector.join(timeout=30)
        if self.injector is not None:
            if self.injector.error is not None:
                raise self.injector.error
            if self.injector.is_alive():
                raise RuntimeError(f"the injector of {self.dag_id} did not stop within 30 s")
        return self

    def state(self, run_id: str | None = None) -> str:
        return self.stack.run_state(self.dag_id, run_id or self.run_id)

    def task_instances(self, run_id: str | None = None) -> list[dict[str, Any]]:
        return self.stack.task_instances(self.dag_id, run_id or self.run_id)

    def tries(self, task_id: str = "train", map_index: int = -1, run_id: str | None = None) -> list[dict[str, Any]]:
        """Every try of the task instance, as the UI's try history shows them (state of each)."""
        path = f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id or self.run_id}/taskInstances/{task_id}"
        answer = self.stack.request("GET", path + (f"/{map_index}" if map_index >= 0 else "") + "/tries")
        tries: list[dict[str, Any]] = answer["task_instances"]
        return sorted(tries, key=lambda t: t["try_number"])

    def xcom(
        self, key: str = "return_value", task_id: str = "train", map_index: int = -1, run_id: str | None = None
    ) -> Any:
        return self.stack.xcom(self.dag_id, run_id or self.run_id, task_id, key, map_index)

    def _log_folder(self, task_id: str, map_index: int, run_id: str | None) -> Path:
        folder = self.stack.home / "logs" / f"dag_id={self.dag_id}" / f"run_id={run_id or self.run_id}"
        return folder / f"task_id={task_id}" / (f"map_index={map_index}" if map_index >= 0 else "")

    def log(self, task_id: str = "train", try_number: int = 1, map_index: int = -1, run_id: str | None = None) -> str:
        """The try's task log and its triggers' logs, as written by the worker and the triggerer."""
        folder = self._log_folder(task_id, map_index, run_id)
        files = [folder / f"attempt={try_number}.log", *sorted(folder.glob(f"attempt={try_number}.log.trigger.*"))]
        return "\n".join(render(path.read_text()) for path in files if path.exists())

    def started(self, try_number: int, task_id: str = "train", map_index: int = -1) -> bool:
        """Whether the try's task process has started: its log file exists (it is written from the
        first line on), read from the disk instead of polling the API server."""
        return (self._log_folder(task_id, map_index, None) / f"attempt={try_number}.log").exists()

    def trigger_started(self, try_number: int = 1, task_id: str | None = None, map_index: int = -1) -> bool:
        """Whether the triggerer has started a trigger of the try (of any task when ``task_id`` is None),
        which implies the task was DEFERRED."""
        if task_id is None:
            run_folder = self._log_folder("", -1, None).parent
            return any(run_folder.glob(f"task_id=*/**/attempt={try_number}.log.trigger.*.log"))
        return any(self._log_folder(task_id, map_index, None).glob(f"attempt={try_number}.log.trigger.*.log"))

    def trigger_log(
        self, task_id: str = "train", try_number: int = 1, map_index: int = -1, run_id: str | None = None
    ) -> str:
        """Only what the triggerer wrote for the try's triggers (empty if none ran)."""
        folder = self._log_folder(task_id, map_index, run_id)
        files = sorted(folder.glob(f"attempt={try_number}.log.trigger.*"))
        return "\n".join(render(path.read_text()) for path in files)


def render(text: str) -> str:
    """Airflow 3 writes task logs as JSON lines: the event, then each other field as ``key=value``."""
    lines = []
    for raw in text.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            lines.append(raw)
            continue
        if not isinstance(record, dict):
            lines.append(raw)
            continue
        rest = [
            f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}"
            for k, v in record.items()
            if k not in ("event", "timestamp", "level", "logger")
        ]
        lines.append(" ".join([str(record.get("event", "")), *rest]))
    return "\n".join(lines)


class ScenarioLauncher:
    """Starts every scenario's emulator and run at once; stops the emulators at the end."""

    def __init__(self, stack: AirflowStack, root: Path, shared: Mapping[str, Any] | None = None) -> None:
        self.stack, self.root, self.shared = stack, root, dict(shared or {})
        self.runs: dict[str, ScenarioRun] = {}

    def launch(self, scenarios: Iterable[Scenario]) -> None:
        pending: dict[str, Scenario] = {}
        for scenario in scenarios:
            known = self.runs[scenario.dag_id].scenario if scenario.dag_id in self.runs else None
            if pending.setdefault(scenario.dag_id, known or scenario) != scenario:
                raise ValueError(f"two different scenarios run the DAG {scenario.dag_id}")
        pending = {dag_id: s for dag_id, s in pending.items() if dag_id not in self.runs}
        for scenario in pending.values():
            workdir = self.root / scenario.dag_id
            workdir.mkdir(parents=True)
            run = self.runs[scenario.dag_id] = ScenarioRun(scenario, self.stack, self._emulator(scenario), workdir)
            if scenario.backend != "shared":
                self._connect(scenario, run.emulator)
            if scenario.backend == "kubernetes":
                run.pods = PodWatch(run.emulator)
                run.pods.start()
            if scenario.prepare is not None:
                scenario.prepare(run.emulator)
        for scenario in pending.values():
            self.stack.wait_for_dag(scenario.dag_id)
        for scenario in pending.values():
            run = self.runs[scenario.dag_id]
            conf = {**scenario.conf, "workdir": str(run.workdir)}
            if scenario.backend == "kubernetes":  # for DAGs that take config_file= instead of a connection
                conf["kubeconfig"] = str(run.emulator.kubeconfig_path)
            run.run_ids = [self.stack.trigger(scenario.dag_id, conf) for _ in range(scenario.runs)]
            if scenario.injector is not None:  # nothing runs on the emulator before the task starts
                run.injector = scenario.injector().bind(run.emulator, run)
                run.injector.start()

    def _emulator(self, scenario: Scenario) -> Any:
        if scenario.backend == "shared":
            return self.shared
        if scenario.backend == "kubernetes":
            from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

            kubernetes = KubernetesEmulator("demo").start()
            kubernetes.kubeconfig_path = kubernetes.write_kubeconfig(self.root / f"{scenario.dag_id}.kubeconfig")
            return kubernetes
        from airflow_gpu.testing.batch.emulator import BatchEmulator

        return BatchEmulator(stop_timeout=5).start()

    def _connect(self, scenario: Scenario, emulator: Any) -> None:
        """The scenario's connection, created as an admin does it in the UI (REST API v2)."""
        if scenario.backend == "kubernetes":
            body = {"conn_type": "kubernetes", "extra": json.dumps({"kube_config_path": str(emulator.kubeconfig_path)})}
        else:
            aws = emulator.airflow_connection()
            body = {**{k: aws[k] for k in ("conn_type", "login", "password")}, "extra": json.dumps(aws["extra"])}
        try:
            self.stack.request("POST", "/api/v2/connections", {"connection_id": scenario.connection_id, **body})
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"creating {scenario.connection_id}: {error.read().decode()[:500]}") from error

    def finish(self, dag_id: str) -> None:
        """Stop one scenario's injector and emulator (with every process it started)."""
        run = self.runs[dag_id]
        for thread in (run.injector, run.pods):
            if thread is not None:
                thread.stop.set()
                thread.join(timeout=30)
        if run.scenario.backend != "shared":
            run.emulator.stop()

    def close(self) -> None:
        """Finish every scenario (injector, then emulator with its processes), whatever fails."""
        with contextlib.ExitStack() as stack:
            for dag_id in self.runs:
                stack.callback(self.finish, dag_id)

"""Everything the soak runs on, started in order and stopped in reverse, whatever happened.

PostgreSQL and Redis first, then the emulators (the Kubernetes "demo" cluster: two spot 8x H100
nodes, an on-demand 4x L4 and a CPU node; AWS Batch with the gpu-spot and gpu-on-demand queues),
then stock Airflow 3 in the production shape: api-server, scheduler, dag-processor, two
triggerers and two Celery workers. No ``airflow_local_settings``: the scheduler is Airflow's own.
A supervisor thread starts any part that exits again, as systemd or Kubernetes would.

Settings that differ from Airflow's defaults, and why (each a documented setting users may set):
a dead worker's task is noticed in 30 s, not 5 minutes (``task_instance_heartbeat_timeout``); a
task queued in a Redis that was restarted empty is sent again after 60 s, not 10 minutes
(``task_queued_timeout``); a restarted scheduler adopts the tasks of the one it replaced within
a minute, not five (``orphaned_tasks_check_interval``: until then nobody watches their heartbeats
or their queue time, which the first soaks showed as tasks "running" for 8 minutes on a dead
worker, docs/production.rst); each DAG file is parsed once (they do not change during a soak).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.postgres import PostgresServer
from airflow_gpu.testing.redis import RedisServer

DAG_FILE = Path(__file__).resolve().with_name("soak_dags.py")
PASSWORD = "airflow-gpu-soak"
#: ``[scheduler] task_queued_timeout``: a task queued longer is sent again, at most
#: ``num_stuck_in_queued_retries`` (2) times, then failed (the judge reads those events).
TASK_QUEUED_TIMEOUT = 60
#: What each Celery worker imports before it forks its pool (``[celery] extra_celery_config``).
WORKER_IMPORTS = ("airflow_gpu.operators.kubernetes", "airflow_gpu.operators.batch", "airflow_gpu.operators.accelerate")


class RequestCounter:
    """Counts the requests that reach moto behind the Batch emulator's fault layer (the ones that layer
    answers itself are its faults' ``hits``): the report's Batch API requests."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app, self.total = app, 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        self.total += 1
        return self.app(environ, start_response)


@dataclass
class SoakStack:
    """The soak's running parts."""

    stack: AirflowStack
    kubernetes: Any
    batch: Any
    redis: RedisServer
    postgres: PostgresServer
    workdir: Path
    batch_requests: RequestCounter
    batch_faulted: int = 0  # requests the Batch fault layer answered itself, counted at ``disarm``

    def disarm(self) -> None:
        """End the fault window: a Batch fault armed for "the next N calls" would otherwise wait for
        calls after the window (a SubmitJob comes once a minute), and the Kubernetes rules too."""
        self.kubernetes.clear_api_faults()
        faults = self.batch._throttle
        self.batch_faulted = sum(armed.hits for armed in faults.armed())
        with faults._lock:
            faults._armed.clear()


class Supervisor(threading.Thread):
    """Starts again any Airflow part that exited (a scheduler that died on a dropped connection)."""

    def __init__(
        self, stack: AirflowStack, lock: threading.Lock, held_down: set[str], log: Callable[[str], Any]
    ) -> None:
        """``held_down``: the parts a fault has killed and will start again itself."""
        super().__init__(name="soak-supervisor", daemon=True)
        self.stack, self.lock, self.held_down, self.log = stack, lock, held_down, log
        self.stop = threading.Event()
        self.restarts: list[tuple[float, str, int | None]] = []

    def run(self) -> None:
        while not self.stop.wait(2):
            with self.lock:
                for name, process in list(self.stack.parts.items()):
                    code = process.poll()
                    if code is not None and name not in self.held_down:
                        self.log(f"supervisor: {name} exited ({code}); starting it again")
                        self.restarts.append((time.time(), name, code))
                        self.stack.restart_part(name)


@contextlib.contextmanager
def soak_stack(workdir: Path, log: Callable[[str], Any], workers: int = 2, triggerers: int = 2) -> Iterator[SoakStack]:
    from airflow_gpu.testing.batch.emulator import BatchEmulator
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

    shutil.rmtree(workdir, ignore_errors=True)
    dags = workdir / "dags"
    dags.mkdir(parents=True)
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    with (
        PostgresServer(workdir / "postgres") as postgres,
        RedisServer(workdir / "redis") as redis,
        KubernetesEmulator("demo", job_backoff_seconds=1) as kubernetes,
        BatchEmulator(stop_timeout=5) as batch,
    ):
        kubernetes.write_kubeconfig(workdir / "kubeconfig")
        counter = RequestCounter(batch._throttle.app)
        batch._throttle.app = counter
        log(f"PostgreSQL {postgres.url}; Redis {redis.url}; Kubernetes {kubernetes.url}; Batch {batch.endpoint_url}")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubernetes.kubeconfig_path)}}
        stack = AirflowStack(
            workdir / "airflow-home",
            dags,
            password=PASSWORD,
            parallelism=16,
            # Five DAGs hold a worker slot per running task (three shards of each non-deferrable fan-out, each
            # non-deferrable training): 4 slots per worker left some queued behind them.
            celery_concurrency=6,
            celery_broker=redis.url,
            celery_workers=workers,
            triggerers=triggerers,
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
                "AIRFLOW_CONN_AWS_DEFAULT": batch.airflow_connection_uri(),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(TASK_QUEUED_TIMEOUT),
                # Each task runs in a process forked from its Celery worker, which parses the DAG file anew: with
                # the provider's operators imported once by the worker (Celery's ``imports``), no task imports
                # them again (docs/testing.rst).
                "AIRFLOW__CELERY__EXTRA_CELERY_CONFIG": json.dumps({"imports": list(WORKER_IMPORTS)}),
                # Checked only every this many seconds of one scheduler's life, for the tasks it queued or
                # adopted (Airflow 3.3): at the default 120 s, a scheduler killed about once a minute never
                # checked, and two trainings sat 13 minutes queued after Redis restarts (the eleventh soak).
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "15",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            },
        )
        log("starting Airflow: api-server, scheduler, dag-processor, 2 triggerers, 2 Celery workers (CeleryExecutor)")
        with stack:
            yield SoakStack(stack, kubernetes, batch, redis, postgres, workdir, counter)

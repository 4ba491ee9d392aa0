"""One migrated Airflow home shared by the end-to-end tests (migrating takes ~10 s)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_gpu.testing.airflow_stack import AirflowStack
from airflow_gpu.testing.batch.emulator import BatchEmulator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

DAGS = Path(__file__).resolve().parent / "dags"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


@pytest.fixture
def airflow(airflow_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``airflow`` command with the shared home and extra environment."""

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "airflow"), *args], env={**airflow_env, **env}, capture_output=True, text=True, timeout=300
        )

    return run


@pytest.fixture(scope="session")
def stack_batch_emulator() -> Iterator[BatchEmulator]:
    """The AWS Batch emulator the shared stack's ``aws_default`` points at."""
    with BatchEmulator(stop_timeout=5) as batch:
        yield batch


@pytest.fixture(scope="session")
def airflow_stack(
    tmp_path_factory: pytest.TempPathFactory, stack_batch_emulator: BatchEmulator
) -> Iterator[tuple[AirflowStack, KubernetesEmulator]]:
    """One real Airflow (api-server, scheduler, dag-processor, triggerer) on free ports, whose
    ``kubernetes_default`` points at one emulator; shared by the REST end-to-end tests, torn down
    (every process group) at the end of the session, whatever happened."""
    import json
    import shutil

    root = tmp_path_factory.mktemp("stack")
    dags = root / "dags"  # the shipped example DAGs and the lifecycle test DAGs, side by side
    shutil.copytree(Path(__file__).resolve().parents[2] / "dags", dags, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("gpu_lifecycle.py", "gpu_batch_lifecycle.py"):
        shutil.copy(Path(__file__).resolve().parent / "stack_dags" / name, dags)
    with KubernetesEmulator("demo") as emulator:
        emulator.write_kubeconfig(root / "kubeconfig")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(emulator.kubeconfig_path)}}
        stack = AirflowStack(
            root / "airflow-home",
            dags,
            extra_env={
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
                "AIRFLOW_CONN_AWS_DEFAULT": stack_batch_emulator.airflow_connection_uri(),
                # A dead worker is noticed in ~30 s instead of 5 minutes (the worker-crash test).
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            },
        )
        with stack:
            yield stack, emulator

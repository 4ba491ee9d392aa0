"""Test GPU DAGs in CI without a cluster or a GPU.

The provider's pytest plugin (installed with it) gives the fixtures: ``kubernetes_default_connection``
starts a local Kubernetes emulator and points Airflow's ``kubernetes_default`` connection at it for
the test; ``aws_default_connection`` does the same for AWS Batch. ``dag.test()`` runs a whole DAG in
the test's own process, as ``airflow dags test`` does.

The CI job sets ``AIRFLOW__CORE__DAGS_FOLDER`` to the DAG files and runs ``airflow db migrate``
first: ``dag.test()`` records the run in Airflow's metadata database (SQLite is enough).
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag()  # [core] dags_folder, parsed as the DAG processor parses it


def test_every_dag_file_parses(dagbag: DagBag) -> None:
    # An accelerator spec, an image or a spot policy that cannot work is an import error here.
    assert dagbag.import_errors == {}


def test_the_first_gpu_task_runs_on_an_l4(dagbag: DagBag, kubernetes_default_connection: Any) -> None:
    # kubernetes_default points at a fresh emulated cluster: spot 8x H100 nodes, an on-demand 4x L4 node.
    run = dagbag.get_dag("first_gpu_task").test()
    assert run.state == "success"
    ti = run.get_task_instance("hello_gpu")
    # The workload's ::airflow-gpu-result:: line is the task's return value.
    assert ti.xcom_pull(task_ids="hello_gpu") == {"accelerator": "L4"}
    # Its GPU profile: the emulator gave the pod one L4, as the device plugin does on a cluster.
    profile = ti.xcom_pull(task_ids="hello_gpu", key="gpu_profile")
    assert [gpu["name"] for gpu in profile["gpus"]] == ["NVIDIA L4"]

"""The official cncf-kubernetes ``KubernetesJobOperator``, unmodified, runs an Indexed Job on the emulator.

``Ti`` stands in for Airflow's task instance (identity and XCom), as in the Batch operator tests;
everything else is the operator's own code talking to the emulator over HTTP.
"""

from __future__ import annotations

import pytest

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.official import Ti, context

pytestmark = pytest.mark.slow  # imports KubernetesPodOperator (seconds)


def test_an_indexed_job_through_the_cncf_operator(kubernetes_default_connection: KubernetesEmulator) -> None:
    from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator

    operator = KubernetesJobOperator(
        task_id="train",
        name="train",
        image="python:3.12",
        cmds=["sh", "-c", "echo index=$JOB_COMPLETION_INDEX host=$HOSTNAME"],
        completion_mode="Indexed",
        completions=2,
        parallelism=2,
        wait_until_job_complete=True,
        job_poll_interval=0.2,
        config_file=str(kubernetes_default_connection.kubeconfig_path),
    )
    ti = Ti()
    operator.execute(context(ti))
    job = ti.xcom["job"]
    name = job["metadata"]["name"]
    assert name.startswith("job-train-") and ti.xcom["job_name"] == name
    status = job["status"]
    assert (status["succeeded"], status["completed_indexes"]) == (2, "0,1")
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert status["completion_time"] is not None

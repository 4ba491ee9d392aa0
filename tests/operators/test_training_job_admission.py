"""A Kubernetes training whose machines the API refuses, or whose API server throttles and fails, run by
``AccelerateTrainOperator`` against the emulator (issue 25, behaviours 1 and 3).

The refusals are the API server's (the emulator's ResourceQuota admission: 403 ``exceeded quota``); the
Job controller then only records ``FailedCreate`` events and retries, sets no condition, and no pod
exists: without a clock of its own the task waits for ever, and a partly admitted Job holds the GPUs
of the ranks it did create. Throttling (429 beyond what urllib3 retries), 500/503 and reset
connections are ``inject_api_fault`` rules on the training's own polls. Simulated containers: seconds
per run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from kubernetes import client, config

from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD, STATE_STORE_KEY
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.end_hold import release
from airflow_gpu.utils.training_job import JOB_LABEL, JOB_TTL_SECONDS
from tests.operators.task_context import Store
from tests.operators.test_training_job_runs import context, jobs, training

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

QUOTA_MESSAGE = "exceeded quota: gpus, requested: requests.nvidia.com/gpu=1"


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def gpu_quota(emulator: KubernetesEmulator, gpus: int) -> None:
    api = core(emulator)
    api.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}}}
    )
    wait_for(lambda: api.read_namespaced_resource_quota("gpus", "default").status.used, 10, "the quota's status")


def services(emulator: KubernetesEmulator) -> list[str]:
    return [s.metadata.name for s in core(emulator).list_namespaced_service("default", label_selector=JOB_LABEL).items]


def run_in_thread(op: Any, ctx: dict[str, Any]) -> tuple[threading.Thread, list[Any]]:
    """``execute`` in a thread, as a worker runs it; its result or exception in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(op.execute(ctx))
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, outcome


@pytest.mark.parametrize("gpus", [0, 1], ids=["none-admitted", "partly-admitted"])
def test_ranks_refused_at_admission_fail_the_training_within_the_startup_timeout(
    kubernetes_default_connection: KubernetesEmulator, gpus: int
) -> None:
    """A GPU quota with room for no rank, or for one of two: past ``startup_timeout_seconds`` the Job and its
    Service are deleted (the admitted rank's GPU is not held until a rendezvous times out) and the task
    fails with the API server's refusal, not as an application error and without a resubmission."""
    emulator = kubernetes_default_connection
    gpu_quota(emulator, gpus)
    worker, outcome = run_in_thread(training(startup_timeout_seconds=3), context())
    job = wait_for(lambda: next(iter(jobs(emulator)), None), 30, "the training Job")
    if gpus:
        wait_for(lambda: len(core(emulator).list_namespaced_pod("default").items) == 1 or None, 30, "one rank")
    worker.join(60)
    assert not worker.is_alive(), "the training waited on for its refused ranks"
    [error] = outcome
    assert isinstance(error, Exception), error
    assert QUOTA_MESSAGE in str(error) and f"{2 - gpus} of 2 machines of Job {job}" in str(error), error
    assert "application" not in str(error)
    assert wait_for(lambda: jobs(emulator) == [] or None, 60, "the Job to go")
    assert services(emulator) == []
    assert wait_for(lambda: not core(emulator).list_namespaced_pod("default").items or None, 60, "the ranks to go")


def test_a_deferred_training_whose_ranks_are_refused_fails_with_the_refusal(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    emulator, ctx = kubernetes_default_connection, context()
    gpu_quota(emulator, 0)
    with pytest.raises(TaskDeferred) as deferred:
        training(deferrable=True, startup_timeout_seconds=3).execute(ctx)  # type: ignore[arg-type]
    trigger = deferred.value.trigger

    async def event() -> dict[str, Any]:
        async for fired in trigger.run():
            return dict(fired.payload)
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(event(), 60))
    assert payload["status"] == "failed" and QUOTA_MESSAGE in payload["message"], payload
    resumed = training(deferrable=True, startup_timeout_seconds=3)
    with pytest.raises(Exception, match="exceeded quota: gpus"):
        resumed.resume_execution(RESUME_METHOD, {"event": payload}, ctx)  # type: ignore[arg-type]
    assert wait_for(lambda: jobs(emulator) == [] or None, 60, "the Job to go") and services(emulator) == []


def test_throttling_server_errors_and_resets_during_the_training_do_not_fail_it(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """Each of the training's polls answered badly for a while: 429 with ``Retry-After`` more often than
    urllib3 asks again by itself, 500 and 503 without it, and reset connections. The training still ends
    with its result, in one Job."""
    emulator = kubernetes_default_connection
    worker, outcome = run_in_thread(training(seconds=6), context())
    job = wait_for(lambda: next(iter(jobs(emulator)), None), 30, "the training Job")
    emulator.inject_api_fault(verb="get", resource="jobs", status=429, retry_after=1, times=5)
    emulator.inject_api_fault(verb="get", resource="jobs", status=500, times=2)
    emulator.inject_api_fault(verb="list", resource="pods", status=503, times=2)
    emulator.inject_api_fault(verb="get", resource="jobs", status=0, times=6)
    worker.join(120)
    assert not worker.is_alive()
    assert outcome == [{"loss": 0.25}], outcome
    hit = {(f["verb"], f["resource"], f["status"]) for f in emulator.api_faults_injected}
    assert {("get", "jobs", 429), ("get", "jobs", 500), ("list", "pods", 503), ("get", "jobs", 0)} <= hit
    assert jobs(emulator) in ([], [job])


@pytest.mark.parametrize("retries", [0, 1], ids=["last-try", "retry-takes-over"])
def test_an_exception_leaving_execute_deletes_the_job_unless_a_retry_takes_it_over(
    kubernetes_default_connection: KubernetesEmulator, retries: int
) -> None:
    """A poll that fails for good (RBAC without ``list pods``): on the task's last try the Job and its
    Service go with the exception, as KPO's ``cleanup()`` deletes its pod; with a retry to come the Job
    trains on and the run stays open for the retry's take-over (``retry_handover``). Without ``list pods``
    the machines' end hold cannot be let go (their names are not known): the Job's deletion stops them
    and keeps them until ``airflow-gpu reap``, which the task log says, lets them go."""
    emulator, store = kubernetes_default_connection, Store()
    ctx = context(1, store, max_tries=retries)
    worker, outcome = run_in_thread(training(), ctx)
    job = wait_for(lambda: next(iter(jobs(emulator)), None), 30, "the training Job")
    emulator.inject_api_fault(verb="list", resource="pods", status=403, times=None)
    worker.join(60)
    assert not worker.is_alive()
    [error] = outcome
    assert getattr(error, "status", None) == 403, error
    emulator.clear_api_faults()
    if retries:
        assert jobs(emulator) == [job] and services(emulator) == [job]
        assert store[STATE_STORE_KEY]["open"] is True
        return
    assert services(emulator) == [] and store[STATE_STORE_KEY]["open"] is False
    batch = client.BatchV1Api(core(emulator).api_client)
    assert batch.read_namespaced_job(job, "default").metadata.deletion_timestamp is not None
    machines = core(emulator).list_namespaced_pod("default", label_selector=f"{JOB_LABEL}={job}").items
    assert machines and all(m.metadata.deletion_timestamp is not None for m in machines)  # stopped, held
    for machine in machines:  # the API whole again: what ``airflow-gpu reap --delete`` does for them
        release(core(emulator), machine.metadata.name, "default", logging.getLogger(__name__))
    assert wait_for(lambda: jobs(emulator) == [] or None, 60, "the Job to go")


def test_training_jobs_carry_a_ttl_as_a_backstop(kubernetes_default_connection: KubernetesEmulator) -> None:
    from kubernetes.client import BatchV1Api

    emulator = kubernetes_default_connection
    worker, _ = run_in_thread(training(seconds=1), context())
    job = wait_for(lambda: next(iter(jobs(emulator)), None), 30, "the training Job")
    api = BatchV1Api(core(emulator).api_client)
    assert api.read_namespaced_job(job, "default").spec.ttl_seconds_after_finished == JOB_TTL_SECONDS
    worker.join(60)

"""The RBAC of docs/permissions, applied as shipped to the Kubernetes emulator's RBAC authorizer
(``testing/kubernetes/rbac.py``), and GPU tasks run under exactly those roles with a ServiceAccount's
token from the TokenRequest API, as a worker in a cluster runs.

With the tasks' Role and the nodes' ClusterRole a profiled pod runs to success, sync (its XCom sidecar
read by exec) and deferred (the triggerer's watch), with its node's instance and capacity type in the
GPU profile. With the Role alone tasks still run; what ``get nodes`` answers is lost: a pod a person
deletes is no longer told apart from a spot reclaim (its node still there), so it is resubmitted as
one, and the profile's cost has no instance type. With neither, the pod's create is refused in the
API server's words.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kubernetes import client, config, utils

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.kubernetes.kubeconfig import kubeconfig_text
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from tests.operators.task_context import Store, Ti

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fast_api_backoff")]

PERMISSIONS = Path(__file__).resolve().parents[2] / "docs" / "permissions"
#: The names the shipped files use: the tasks' namespace and the workers' ServiceAccount.
NAMESPACE, ACCOUNT, ACCOUNT_NAMESPACE = "gpu-tasks", "airflow-worker", "airflow"
TASKS, NODES = "kubernetes-tasks.yaml", "kubernetes-nodes.yaml"
RESULT = "echo '::airflow-gpu-result::{\"loss\": 0.5}'"


def admin(emulator: KubernetesEmulator) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(emulator.kubeconfig_path))


def worker_kubeconfig(emulator: KubernetesEmulator, tmp_path: Path, *files: str) -> Path:
    """Namespaces and the ServiceAccount the files name, the files applied as they are, and a kubeconfig
    with the account's token (TokenRequest, as ``kubectl create token`` asks)."""
    api = admin(emulator)
    core = client.CoreV1Api(api)
    for namespace in (NAMESPACE, ACCOUNT_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_service_account(ACCOUNT_NAMESPACE, {"metadata": {"name": ACCOUNT}})
    for name in files:
        utils.create_from_yaml(api, str(PERMISSIONS / name))
    token = core.create_namespaced_service_account_token(ACCOUNT, ACCOUNT_NAMESPACE, {"spec": {"audiences": []}})
    path = tmp_path / "worker-kubeconfig"
    path.write_text(kubeconfig_text(api.configuration.host, namespace=NAMESPACE, token=token.status.token))
    return path


def context() -> Any:
    return {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None, "task_state_store": Store()}


def operator(kubeconfig: Path, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", namespace=NAMESPACE, kubernetes_conn_id=None, config_file=str(kubeconfig),
        **{"accelerator": "L4", "cmds": ["sh", "-c", RESULT], "startup_check_interval_seconds": 1, **kwargs},
    )  # fmt: skip


def pods(emulator: KubernetesEmulator) -> list[Any]:
    return list(client.CoreV1Api(admin(emulator)).list_namespaced_pod(NAMESPACE).items)


def test_a_profiled_pod_runs_to_success_under_the_shipped_roles(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS, NODES)
    ctx = context()
    operator(kubeconfig, do_xcom_push=True).execute(ctx)  # KPO reads the sidecar's file by exec
    summary = ctx["ti"].xcom["gpu_profile_summary"]
    assert (summary["instance_type"], summary["capacity"]) == ("g6.24xlarge", "on-demand")  # the node's labels
    # Deleted at the end: KPO asks with the pod's grace period, so it may still be terminating (its sidecar
    # stopping) when execute returns; a pod never deleted is still there after the wait.
    wait_for(lambda: pods(kubernetes_emulator) == [], 30, "the pod to be deleted")


def test_a_deferred_pod_runs_to_success_under_the_shipped_roles(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS, NODES)
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        operator(kubeconfig, deferrable=True).execute(ctx)

    async def first_event() -> dict[str, Any]:
        async for event in deferred.value.trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event["status"] == "success", event
    operator(kubeconfig, deferrable=True).trigger_reentry(ctx, event, **deferred.value.kwargs)
    assert ctx["ti"].xcom["gpu_profile_summary"]["instance_type"] == "g6.24xlarge"


def deleted_while_running(emulator: KubernetesEmulator, kubeconfig: Path, tmp_path: Path) -> tuple[Any, Any]:
    """A pod that a person deletes while it runs (its node stays); a pod submitted after it ends at once."""
    marker = tmp_path / "first-pod-ran"
    script = f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60"
    ctx = context()
    op = operator(kubeconfig, cmds=["sh", "-c", script], gpu_profile=False)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = op.execute(ctx)
        except Exception as error:  # what the task ended with is the test's subject
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    running = lambda: [p.metadata.name for p in pods(emulator) if p.status.phase == "Running"]  # noqa: E731
    [pod] = wait_for(lambda: running() or None, 60, "the pod to run")
    wait_for(marker.exists, 30, "the workload to start")
    emulator.delete_by_person(pod, NAMESPACE)
    thread.join(120)
    assert not thread.is_alive()
    return outcome, ctx


def test_with_nodes_readable_a_pod_a_person_deletes_fails_the_try(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS, NODES)
    outcome, ctx = deleted_while_running(kubernetes_emulator, kubeconfig, tmp_path)
    assert isinstance(outcome.get("error"), AirflowException), outcome
    assert "not a spot interruption" in str(outcome["error"]) and "still exists" in str(outcome["error"])
    assert not [p for p in pods(kubernetes_emulator)], "the deleted pod is released, not kept for ever"
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []


def test_without_get_nodes_a_pod_a_person_deletes_counts_as_a_preemption_and_the_cost_has_no_instance(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS)
    outcome, ctx = deleted_while_running(kubernetes_emulator, kubeconfig, tmp_path)
    assert "error" not in outcome, outcome  # resubmitted, and the second pod succeeded
    [interruption] = ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY]
    assert (interruption["outcome"], interruption["reason"], interruption["action"]) == (
        "preempted",
        "PodDeleted",
        "resubmit",
    )
    ctx = context()
    operator(kubeconfig).execute(ctx)
    assert ctx["ti"].xcom["gpu_profile_summary"]["instance_type"] is None


def test_without_the_tasks_role_the_pod_is_refused_in_the_api_servers_words(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path
) -> None:
    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, NODES)
    with pytest.raises(Exception) as raised:
        operator(kubeconfig).execute(context())
    assert (
        'pods is forbidden: User "system:serviceaccount:airflow:airflow-worker" cannot create resource "pods" '
        'in API group "" in the namespace "gpu-tasks"'
    ) in str(raised.value)
    assert pods(kubernetes_emulator) == []


def training_operator(**kwargs: Any) -> Any:
    from airflow_gpu.operators.accelerate import AccelerateTrainOperator
    from tests.operators.test_accelerate_operator import SCRIPT
    from tests.operators.test_training_job_runs import RESULT as TRAINED

    return AccelerateTrainOperator(
        task_id="train", training_script=SCRIPT, target="kubernetes", accelerator="L4", num_machines=2,
        image="simulated.local/train:1", namespace=NAMESPACE, poll_interval=0.2,
        env={"SIMULATED_SECONDS": str(kwargs.pop("seconds", 1)), "SIMULATED_OUTPUT": f"training\n{TRAINED}"},
        **kwargs,
    )  # fmt: skip


def as_worker(emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped roles, and ``kubernetes_default`` (which the training operator reads) as the account."""
    kubeconfig = worker_kubeconfig(emulator, tmp_path, TASKS, NODES)
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))


def assert_cleaned_up(emulator: KubernetesEmulator) -> None:
    api = admin(emulator)
    assert wait_for(lambda: not client.BatchV1Api(api).list_namespaced_job(NAMESPACE).items or None, 60, "Jobs")
    assert client.CoreV1Api(api).list_namespaced_service(NAMESPACE).items == []


def test_a_two_machine_training_runs_to_success_under_the_shipped_roles(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AccelerateTrainOperator's Indexed Job and headless Service, created, followed and deleted as the account."""
    from tests.operators.test_training_job_runs import context as training_context

    as_worker(kubernetes_emulator, tmp_path, monkeypatch)
    assert training_operator().execute(training_context()) == {"loss": 0.25}
    assert_cleaned_up(kubernetes_emulator)


def test_a_retry_that_takes_a_training_job_over_marks_it_under_the_shipped_roles(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry takes over the Job an earlier try left and writes its mark on it (``patch`` on ``jobs``): without
    the mark, that try, living on orphaned, would take the Job for abandoned (``orphaned_try.linger``)."""
    from airflow_gpu.operators.orphaned_try import TAKEN_ANNOTATION
    from airflow_gpu.operators.training_job_reattach import take_over
    from tests.operators.test_training_job_runs import LOG
    from tests.operators.test_training_job_runs import context as training_context

    as_worker(kubernetes_emulator, tmp_path, monkeypatch)
    store = Store()
    tries = []
    for number in (1, 2):
        op = training_operator(seconds=600)
        run, ctx = op._make_runner(op.launch), training_context(number, store, max_tries=2)
        run._start(ctx)
        tries.append((run, ctx))
    (first, first_ctx), (second, second_ctx) = tries
    first._submit(first_ctx)
    assert take_over(second.op, second.jobs, second_ctx, LOG) == first.job
    job = client.BatchV1Api(admin(kubernetes_emulator)).read_namespaced_job(first.job, NAMESPACE)
    assert job.metadata.annotations[TAKEN_ANNOTATION] == second.op._taker
    second.jobs.delete(first.job)
    assert_cleaned_up(kubernetes_emulator)


def test_a_deferred_training_whose_rank_is_reclaimed_is_replaced_by_the_trigger_under_the_shipped_roles(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer watches the Job, deletes it after a reclaim and creates its replacement, as the account."""
    from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD
    from tests.operators.test_training_job_runs import context as training_context

    as_worker(kubernetes_emulator, tmp_path, monkeypatch)
    ctx = training_context()
    with pytest.raises(TaskDeferred) as deferred:
        training_operator(seconds=6, deferrable=True).execute(ctx)
    batch = client.BatchV1Api(admin(kubernetes_emulator))
    [first] = [j.metadata.name for j in batch.list_namespaced_job(NAMESPACE).items]

    def running_rank(job: str, rank: int) -> str:
        selector = f"airflow-gpu/training-job={job},batch.kubernetes.io/job-completion-index={rank}"
        core = client.CoreV1Api(admin(kubernetes_emulator))
        found = lambda: next(  # noqa: E731
            (p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
             if p.status.phase == "Running"), None)  # fmt: skip
        return wait_for(found, 60, f"rank {rank} of {job} running")

    async def until_the_end() -> dict[str, Any]:
        async def event() -> dict[str, Any]:
            async for fired in deferred.value.trigger.run():
                return dict(fired.payload)
            raise AssertionError("no event")

        waiting = asyncio.create_task(event())
        victim = await asyncio.to_thread(running_rank, first, 1)
        await asyncio.to_thread(kubernetes_emulator.preempt, victim, NAMESPACE, 0)
        return await asyncio.wait_for(waiting, 90)

    payload = asyncio.run(until_the_end())
    assert payload["job"] == f"{first}-r1", payload
    resumed = training_operator(seconds=6, deferrable=True)
    assert resumed.resume_execution(RESUME_METHOD, {"event": payload}, ctx) == {"loss": 0.25}  # type: ignore[arg-type]
    assert_cleaned_up(kubernetes_emulator)


@pytest.mark.parametrize("nodes", [True, False])
def test_the_gpus_the_cluster_offers_are_told_only_with_the_nodes_role(
    kubernetes_emulator: KubernetesEmulator, tmp_path: Path, nodes: bool
) -> None:
    """A pod no node can hold fails after ``capacity_timeout``; what the cluster offers is in the message
    only where nodes (and pods in every namespace) can be listed."""
    from airflow_gpu.spot.policy import SpotPolicy

    kubeconfig = worker_kubeconfig(kubernetes_emulator, tmp_path, TASKS, *([NODES] if nodes else []))
    policy = SpotPolicy(capacity_timeout=1, fallback_to_on_demand=False)
    with pytest.raises(AirflowException) as raised:
        operator(kubeconfig, accelerator="L4:8", spot=policy, gpu_profile=False).execute(context())
    assert ("The cluster offers:" in str(raised.value)) is nodes

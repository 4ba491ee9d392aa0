"""A new try of ``GPUKubernetesOperator`` takes over an earlier try's succeeded pod that no try read, instead of
running the workload again (issue 26: a deferred task's resume lost, the retry started from the beginning); any
other pod (read, failed, another task instance's) is never taken. Against the Kubernetes emulator over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import STATE_ANNOTATION, GPUKubernetesOperator
from airflow_gpu.spot.classifier import Classification, Outcome
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from tests.operators.task_context import Store, Ti

RESULT = "print('::airflow-gpu-result::' + '{\"loss\": 0.5}')"


def operator(emulator: KubernetesEmulator, **kwargs: Any) -> GPUKubernetesOperator:
    options = {"deferrable": True, "capacity": "on-demand", "gpu_profile": False, **kwargs}
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", cmds=["python3", "-c", RESULT],
        namespace="default", kubernetes_conn_id=None, config_file=str(emulator.kubeconfig_path),
        startup_check_interval_seconds=1, **options,
    )  # fmt: skip


def context(store: Store, try_number: int, **ti: Any) -> Any:
    run_id = ti.pop("run_id", "manual__1")
    max_tries = ti.pop("max_tries", 3)
    return {"ti": Ti(task_id=ti.pop("task_id", "train"), try_number=try_number, max_tries=max_tries, run_id=run_id,
                     **ti),
            "run_id": run_id, "dag": None, "task_state_store": store}  # fmt: skip


def api(emulator: KubernetesEmulator) -> Any:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def pods_ever(emulator: KubernetesEmulator) -> int:
    return len(emulator.pod_phase_times("default"))


def ended_pod(emulator: KubernetesEmulator, made_by: Any, *, script: str = RESULT, phase: str = "Succeeded",
              interruptions: int = 0, profiled: bool = False) -> str:  # fmt: skip
    """A pod of the task try ``made_by`` as that try made it (labels, state annotation, identity in the store),
    ended in ``phase``; ``interruptions`` preemptions recorded in its state before it; ``profiled``: its
    command under the GPU profiler, as the operator wraps it."""
    first = operator(emulator, gpu_profile=profiled)
    for n in range(interruptions):
        first.spot_run.submitted(f"train-{n}")
        first.spot_run.finish(Classification(Outcome.PREEMPTED, "TerminationByKubelet", "", transient=True))
    pod = first.build_pod_request_obj(made_by)
    if not profiled:
        pod.spec.containers[0].command = ["python3", "-c", script]
    pod.metadata.annotations[STATE_ANNOTATION] = json.dumps(first.spot_run.to_json())
    created = api(emulator).create_namespaced_pod("default", pod)
    first._persist_pod_identity_to_task_state_store(made_by, created)
    name: str = pod.metadata.name
    wait_for(lambda: api(emulator).read_namespaced_pod(name, "default").status.phase == phase, 30)
    return name


@pytest.mark.parametrize("deferrable", [True, False])
def test_a_retry_takes_over_an_earlier_tries_succeeded_unread_pod_instead_of_running_again(
    kubernetes_emulator: KubernetesEmulator, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    """Try 1's pod succeeded, then the try was lost before it read the pod (a deferred task's resume lost; a
    worker killed): try 2 creates no pod, returns the pod's result line, publishes the interruptions recorded
    on the pod and where it ran, deletes it (``on_finish_action="delete_pod"``, KPO's default) and says so.
    Before, KPO's reattach deleted the pod and ran the workload a second time."""
    store = Store()
    name = ended_pod(kubernetes_emulator, context(store, 1), interruptions=1)
    retry, second = operator(kubernetes_emulator, deferrable=deferrable), context(store, 2)
    capfd.readouterr()
    assert retry.execute(second) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 1
    xcom = second["ti"].xcom
    assert xcom["return_value"] == {"loss": 0.5} and xcom["pod_name"] == name
    (interruption,) = xcom["gpu_interruptions"]
    assert interruption["workload"] == "train-0" and interruption["reason"] == "TerminationByKubelet"
    assert xcom["gpu_accelerator"]["capacity"] == "on-demand" and xcom["gpu_accelerator"]["location"]  # its node
    said = f"Took over try 1's succeeded pod default/{name} instead of running the workload again"
    assert said in capfd.readouterr().out  # the task log
    wait_for(lambda: not api(kubernetes_emulator).list_namespaced_pod("default").items, 30)


def test_a_taken_over_pods_gpu_profile_is_published(kubernetes_emulator: KubernetesEmulator) -> None:
    """The profiled pod's log holds its GPU profile: the try that takes it over publishes XCom ``gpu_profile``
    for that pod, from the profiler's own report, as the lost resume would have."""
    store = Store()
    name = ended_pod(kubernetes_emulator, context(store, 1), profiled=True)
    second = context(store, 2)
    assert operator(kubernetes_emulator, gpu_profile=True).execute(second) == {"loss": 0.5}
    profile = second["ti"].xcom["gpu_profile"]
    assert profile["workload"] == name and profile["exit_code"] == 0 and pods_ever(kubernetes_emulator) == 1


def test_a_kept_pod_that_is_taken_over_is_marked_checked_so_a_clear_runs_again(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """With ``on_finish_action="keep_pod"`` the taken-over pod stays, labelled ``already_checked`` as KPO labels a
    pod it read: a person who clears the task later gets a new run, not this result again."""
    store = Store()
    name = ended_pod(kubernetes_emulator, context(store, 1))
    assert operator(kubernetes_emulator, on_finish_action="keep_pod").execute(context(store, 2)) == {"loss": 0.5}
    assert api(kubernetes_emulator).read_namespaced_pod(name, "default").metadata.labels["already_checked"] == "True"
    with pytest.raises(TaskDeferred):  # cleared (Airflow raises max_tries to 2 + 3): try 3 runs the workload again
        operator(kubernetes_emulator, on_finish_action="keep_pod").execute(context(store, 3, max_tries=5))
    assert pods_ever(kubernetes_emulator) == 2


@pytest.mark.parametrize("why", ["read", "failed", "reattach_off", "xcom_sidecar"])
def test_a_pod_whose_end_was_read_or_that_failed_is_not_taken_over(
    kubernetes_emulator: KubernetesEmulator, why: str
) -> None:
    """The earlier try read its pod's end (it labelled the kept pod ``already_checked``), or the pod failed, or
    KPO's reattach is off (each try asks for its own pod), or the result was in KPO's sidecar (a Succeeded pod's
    sidecar was read and stopped): the retry runs the workload again in a pod of its own."""
    store = Store()
    failing = "import sys; sys.exit(3)"
    name = ended_pod(kubernetes_emulator, context(store, 1), **({"script": failing, "phase": "Failed"}
                                                                if why == "failed" else {}))  # fmt: skip
    if why == "read":
        body = {"metadata": {"labels": {"already_checked": "True"}}}
        api(kubernetes_emulator).patch_namespaced_pod(name, "default", body)
    options = {"reattach_off": {"durable": False}, "xcom_sidecar": {"do_xcom_push": True}}.get(why, {})
    retry = operator(kubernetes_emulator, **options)
    with pytest.raises(TaskDeferred):
        retry.execute(context(store, 2))
    assert retry.pod.metadata.name != name and pods_ever(kubernetes_emulator) == 2


@pytest.mark.parametrize("other", ["another task", "another run", "another map index", "this try", "a later try"])
def test_a_succeeded_unread_pod_of_another_task_instance_or_try_is_never_taken_over(
    kubernetes_emulator: KubernetesEmulator, other: str
) -> None:
    """Only an earlier try of this task instance hands its result over: a succeeded, unread pod of another task,
    run or mapped instance (a name is a slot, not an identity), or of this try or a later one, is left alone; the
    task runs its own pod."""
    store = Store()
    made_by = {
        "another task": context(Store(), 1, task_id="evaluate"),
        "another run": context(Store(), 1, run_id="manual__2"),
        "another map index": context(Store(), 1, map_index=4),
        "this try": context(store, 2),
        "a later try": context(store, 3),
    }[other]
    name = ended_pod(kubernetes_emulator, made_by)
    retry = operator(kubernetes_emulator)
    with pytest.raises(TaskDeferred):
        retry.execute(context(store, 2))
    assert retry.pod.metadata.name != name and pods_ever(kubernetes_emulator) == 2

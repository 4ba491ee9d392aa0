"""A profiled ``GPUKubernetesOperator`` in an image without ``/bin/sh`` (issue 25, behaviours 4 and 8).

Profiling is on by default and wraps ``cmds`` as ``/bin/sh -c SCRIPT ...``. In a distroless image the
container cannot start: the emulator's kubelet ends it as containerd does (``StartError``, exit code 128,
``exec: "/bin/sh": stat /bin/sh: no such file or directory``). A job that runs fine unprofiled must not fail
for it: the pod is started again with the profiler started by python3 alone, then unprofiled with a note;
no interruption is recorded, no retry spent, and the task's later tries start with the form that worked.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config

from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.operators.kubernetes_profiler import FORMS_KEY
from airflow_gpu.testing.images import distroless
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY, PROFILE_XCOM_KEY
from tests.operators.task_context import Store, Ti

PYTHON_IMAGE = "gcr.io/distroless/python3-debian12:nonroot"
STATIC_IMAGE = "gcr.io/distroless/static-debian12:nonroot"
RESULT = "print('::airflow-gpu-result::' + '{\"loss\": 0.5}')"
# slow: runs the operator in-process against the emulator, KPO's whole flow (seconds each)
pytestmark = pytest.mark.slow


def operator(emulator: KubernetesEmulator, image: str, cmds: list[str], **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", image=image, cmds=cmds, namespace="default",
        kubernetes_conn_id=None, config_file=str(emulator.kubeconfig_path), startup_check_interval_seconds=1, **kwargs,
    )  # fmt: skip


def context(store: Store | None = None, try_number: int = 1, max_tries: int = 0) -> Any:
    ti = Ti(task_id="train", try_number=try_number, max_tries=max_tries)
    return {"ti": ti, "run_id": "manual__1", "dag": None, "task_state_store": Store() if store is None else store}


def pods_ever(emulator: KubernetesEmulator) -> int:
    return len(emulator.pod_phase_times("default"))


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def test_an_image_without_a_shell_is_profiled_through_python3(kubernetes_emulator: KubernetesEmulator) -> None:
    kubernetes_emulator.declare_image(PYTHON_IMAGE, distroless(python=True))
    ctx = context()
    op = operator(kubernetes_emulator, PYTHON_IMAGE, ["python3", "-c", RESULT], on_finish_action="keep_pod")
    assert op.execute(ctx) == {"loss": 0.5}
    assert pods_ever(kubernetes_emulator) == 2  # the shell form could not start; the python3 form ran
    kept = core(kubernetes_emulator).list_namespaced_pod("default").items
    assert [p.metadata.finalizers for p in kept] == [None, None]  # kept, read: the provider's finalizer is off
    containers = [p.spec.containers[0] for p in kept]
    assert sorted(c.command[0] for c in containers) == ["/bin/sh", "python3"]
    (second,) = (c for c in containers if c.command[0] == "python3")
    assert second.command[3:] == ["python3", "-c", RESULT]
    assert {"AIRFLOW_GPU_PROFILER_BUNDLE", "AIRFLOW_GPU_PROFILER_BOOTSTRAP"} <= {e.name for e in second.env}
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []  # not an interruption
    assert "not profiled" not in str(ctx["ti"].xcom[PROFILE_XCOM_KEY])
    assert ctx["task_state_store"][FORMS_KEY] == {PYTHON_IMAGE: "python3"}


def test_an_image_without_shell_or_python_runs_unprofiled_with_a_note_and_later_tries_start_so(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    kubernetes_emulator.declare_image(STATIC_IMAGE, distroless())
    store = Store()
    first = context(store)
    assert operator(kubernetes_emulator, STATIC_IMAGE, ["echo", "trained"]).execute(first) is None
    assert pods_ever(kubernetes_emulator) == 3  # /bin/sh, then python3, then the command itself
    profile = first["ti"].xcom[PROFILE_XCOM_KEY]
    assert profile["note"].startswith(f"not profiled: image {STATIC_IMAGE} has neither /bin/sh nor python3")
    assert first["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    later = context(store, try_number=2, max_tries=1)  # cleared after its success: Airflow raises max_tries
    assert operator(kubernetes_emulator, STATIC_IMAGE, ["echo", "trained"]).execute(later) is None
    assert pods_ever(kubernetes_emulator) == 4  # the later try starts unprofiled at once


def test_an_application_failure_in_a_distroless_image_is_still_one(kubernetes_emulator: KubernetesEmulator) -> None:
    """The fall back is for the wrapper's own program only: the user's bug fails the task as before."""
    from airflow.sdk.exceptions import AirflowFailException

    kubernetes_emulator.declare_image(PYTHON_IMAGE, distroless(python=True))
    with pytest.raises(AirflowFailException, match="the application failed"):
        operator(kubernetes_emulator, PYTHON_IMAGE, ["python3", "-c", "raise SystemExit(3)"]).execute(context())
    assert pods_ever(kubernetes_emulator) == 2


def test_a_deferred_task_falls_back_in_the_triggerer(kubernetes_emulator: KubernetesEmulator) -> None:
    """The trigger sees the pod fail to start and creates the next form's pod itself; the worker resumes only
    for the pod that ran, with the form in the run's state, and keeps it for later tries."""
    from airflow_gpu.triggers.kubernetes import STATE_KEY

    kubernetes_emulator.declare_image(STATIC_IMAGE, distroless())
    ctx = context()
    op = operator(kubernetes_emulator, STATIC_IMAGE, ["echo", "trained"], deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    first = op.pod.metadata.name

    async def first_event() -> dict[str, Any]:
        async for event in deferred.value.trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert (event["status"], event["name"]) == ("success", f"{first}-r2")
    assert event[STATE_KEY]["profiler_forms"] == {STATIC_IMAGE: "none"}
    assert event[STATE_KEY]["interruptions"] == [] and event[STATE_KEY]["submissions"] == 2
    resumed = operator(kubernetes_emulator, STATIC_IMAGE, ["echo", "trained"], deferrable=True)
    resumed.trigger_reentry(ctx, event, **deferred.value.kwargs)
    assert "neither /bin/sh nor python3" in ctx["ti"].xcom[PROFILE_XCOM_KEY]["note"]
    assert ctx["task_state_store"][FORMS_KEY] == {STATIC_IMAGE: "none"}
    assert pods_ever(kubernetes_emulator) == 3

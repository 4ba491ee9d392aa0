"""GPU tasks in a namespace whose PodSecurity level is ``restricted`` (issue 25 leftovers, 4: operator side).

A namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` refuses a pod that does not set
``runAsNonRoot``, a seccomp profile, ``allowPrivilegeEscalation: false`` and ``capabilities.drop: ["ALL"]``
(k8s.io/pod-security-admission ``policy/check_*.go``): 403 on a single pod's create, ``FailedCreate`` for a
Job's ranks, in the emulator with kube-apiserver's wording. Without the security contexts the task fails in
one line that quotes the refusal and names the two KPO arguments that meet it, no spot budget spent; with
KPO's ``security_context`` and ``container_security_context`` set as ``restricted`` requires, every pod the
run creates keeps them (the operator's, the profiler's other wrapper forms, the trigger's replacements,
a training Job's pod template and the Job the trigger makes after a reclaim) and the task succeeds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from kubernetes import client, config
from kubernetes.client import models as k8s

from airflow_gpu.operators.accelerate import AccelerateTrainOperator
from airflow_gpu.operators.accelerate_kubernetes import RESUME_METHOD
from airflow_gpu.operators.kubernetes import GPUKubernetesOperator
from airflow_gpu.testing.images import distroless
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from tests.operators.task_context import Store, Ti
from tests.operators.test_accelerate_operator import SCRIPT
from tests.operators.test_training_job_runs import RESULT, jobs, running_rank
from tests.operators.test_training_job_runs import context as training_context

pytestmark = pytest.mark.usefixtures("fast_api_backoff")

ENFORCE = "pod-security.kubernetes.io/enforce"
PYTHON_IMAGE = "gcr.io/distroless/python3-debian12:nonroot"
#: What ``restricted`` asks of the pod (``runAsNonRoot``, ``runAsUser`` not 0, ``seccompProfile``) and of
#: each container (``allowPrivilegeEscalation``, ``capabilities``); nonroot distroless images run as 65532.
POD_CONTEXT = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
VIOLATIONS = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "base" must set '
    "securityContext.allowPrivilegeEscalation=false)"
)


def core(emulator: KubernetesEmulator) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig_path)))


def restricted(emulator: KubernetesEmulator, namespace: str) -> str:
    """A namespace that enforces ``restricted`` (created, or ``default`` labelled)."""
    labels = {"metadata": {"labels": {ENFORCE: "restricted"}}}
    if namespace == "default":
        core(emulator).patch_namespace(namespace, labels)
    else:
        core(emulator).create_namespace({"metadata": {"name": namespace, **labels["metadata"]}})
    return namespace


def secure() -> dict[str, Any]:
    """KPO's arguments, as a user writes them (the client's models; the Job path serialises them)."""
    return {
        "security_context": k8s.V1PodSecurityContext(
            run_as_non_root=True, run_as_user=65532, seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault")
        ),
        "container_security_context": k8s.V1SecurityContext(
            allow_privilege_escalation=False, capabilities=k8s.V1Capabilities(drop=["ALL"])
        ),
    }


def pod_operator(emulator: KubernetesEmulator, namespace: str, **kwargs: Any) -> GPUKubernetesOperator:
    return GPUKubernetesOperator(
        task_id="train", name="train", accelerator="L4", namespace=namespace, kubernetes_conn_id=None,
        config_file=str(emulator.kubeconfig_path), **{"cmds": ["true"], "startup_check_interval_seconds": 1, **kwargs},
    )  # fmt: skip


def context() -> Any:
    return {"ti": Ti(task_id="train"), "run_id": "manual__1", "dag": None, "task_state_store": Store()}


def assert_secure(pod: dict[str, Any], container: str = "base") -> None:
    spec = pod["spec"]
    assert {k: spec["securityContext"].get(k) for k in POD_CONTEXT} == POD_CONTEXT, spec["securityContext"]
    [base] = (c for c in spec["containers"] if c["name"] == container)
    assert {k: base["securityContext"].get(k) for k in CONTAINER_CONTEXT} == CONTAINER_CONTEXT, base


def pods(emulator: KubernetesEmulator, namespace: str) -> list[dict[str, Any]]:
    api = core(emulator)
    return [api.api_client.sanitize_for_serialization(p) for p in api.list_namespaced_pod(namespace).items]


def assert_refused_in_one_line(message: str, namespace: str) -> None:
    """The refusal quoted, with the arguments that meet ``restricted``, and the policy's no-budget words."""
    assert "\n" not in message and "HTTP response headers" not in message
    assert VIOLATIONS in message
    assert "runAsNonRoot != true" in message and 'seccompProfile.type to "RuntimeDefault" or "Localhost"' in message
    assert ("set the operator's security_context={'runAsNonRoot': True, 'runAsUser': <non-zero>, 'seccompProfile': "
            "{'type': 'RuntimeDefault'}} and container_security_context={'allowPrivilegeEscalation': False, "
            "'capabilities': {'drop': ['ALL']}}") in message  # fmt: skip
    assert f"kubectl get namespace {namespace} --show-labels" in message
    assert "not a preemption" in message and "no spot budget spent" in message


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_pod_without_security_contexts_fails_in_one_line_that_names_the_arguments_restricted_needs(
    kubernetes_emulator: KubernetesEmulator, deferrable: bool
) -> None:
    namespace = restricted(kubernetes_emulator, f"restricted-refused-{int(deferrable)}")
    ctx = context()
    with pytest.raises(AirflowException) as raised:
        pod_operator(kubernetes_emulator, namespace, capacity="spot", deferrable=deferrable).execute(ctx)
    assert not isinstance(raised.value, (AirflowFailException, TaskDeferred))
    assert_refused_in_one_line(str(raised.value), namespace)
    assert f"the API server refused to create the pod in namespace {namespace}: pods " in str(raised.value)
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert pods(kubernetes_emulator, namespace) == []


def test_a_profiled_pod_with_the_restricted_contexts_is_admitted_and_succeeds(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    namespace = restricted(kubernetes_emulator, "restricted-admitted")
    contexts = {"security_context": POD_CONTEXT, "container_security_context": CONTAINER_CONTEXT}  # as docs write
    op = pod_operator(kubernetes_emulator, namespace, on_finish_action="keep_pod", **contexts)
    assert op.gpu_profile  # the profiler's /bin/sh wrapper around cmds
    op.execute(context())
    [pod] = pods(kubernetes_emulator, namespace)
    assert pod["spec"]["containers"][0]["command"][0] == "/bin/sh" and pod["status"]["phase"] == "Succeeded"
    assert_secure(pod)


def test_a_deferred_pod_the_trigger_creates_again_in_another_wrapper_form_keeps_the_contexts(
    kubernetes_emulator: KubernetesEmulator,
) -> None:
    """A distroless image: the first pod cannot start ``/bin/sh``; the trigger creates the python3 form's pod
    from the carried manifest, which must still pass ``restricted``."""
    from airflow_gpu.operators.kubernetes_profiler import FORMS_KEY

    kubernetes_emulator.declare_image(PYTHON_IMAGE, distroless(python=True))
    namespace = restricted(kubernetes_emulator, "restricted-deferred")
    ctx = context()
    cmds = ["python3", "-c", "print('::airflow-gpu-result::' + '{\"loss\": 0.5}')"]
    arguments: dict[str, Any] = {"image": PYTHON_IMAGE, "cmds": cmds, "on_finish_action": "keep_pod", **secure()}
    with pytest.raises(TaskDeferred) as deferred:
        pod_operator(kubernetes_emulator, namespace, deferrable=True, **arguments).execute(ctx)

    async def first_event() -> dict[str, Any]:
        async for event in deferred.value.trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    assert event["status"] == "success" and event["name"].endswith("-r1"), event
    resumed = pod_operator(kubernetes_emulator, namespace, deferrable=True, **arguments)
    assert resumed.trigger_reentry(ctx, event, **deferred.value.kwargs) == {"loss": 0.5}
    assert ctx["task_state_store"][FORMS_KEY] == {PYTHON_IMAGE: "python3"}
    made = {p["metadata"]["name"]: p for p in pods(kubernetes_emulator, namespace)}
    assert made[event["name"]]["spec"]["containers"][0]["command"][0] == "python3"
    for pod in made.values():
        assert_secure(pod)


def training(namespace: str, **kwargs: Any) -> AccelerateTrainOperator:
    """Two profiled L4 machines (simulated containers) that print the result line on each rank."""
    return AccelerateTrainOperator(
        task_id="train", training_script=SCRIPT, target="kubernetes", accelerator="L4", num_machines=2,
        image="simulated.local/train:1", namespace=namespace, poll_interval=0.2,
        env={"SIMULATED_SECONDS": str(kwargs.pop("seconds", 1)), "SIMULATED_OUTPUT": f"training\n{RESULT}"},
        **kwargs,
    )  # fmt: skip


@pytest.mark.slow
def test_a_training_without_security_contexts_fails_with_the_refusal_and_the_arguments(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    emulator = kubernetes_default_connection
    restricted(emulator, "default")
    ctx = training_context()
    with pytest.raises(AirflowException) as raised:
        training("default", startup_timeout_seconds=2).execute(ctx)  # type: ignore[arg-type]
    message = str(raised.value)
    assert " of 2 machines of Job " in message and "Error creating: pods " in message
    assert_refused_in_one_line(message, "default")
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert wait_for(lambda: jobs(emulator) == [] or None, 60, "the Job to go")


@pytest.mark.slow
def test_a_deferred_training_with_the_restricted_contexts_runs_and_its_trigger_replaces_it_admitted(
    kubernetes_default_connection: KubernetesEmulator,
) -> None:
    """The Job's pod template keeps both contexts, and so does the Job the trigger creates after a reclaim."""
    from kubernetes.client import BatchV1Api

    emulator, ctx = kubernetes_default_connection, training_context()
    restricted(emulator, "default")
    batch = BatchV1Api(core(emulator).api_client)
    op = training("default", seconds=6, deferrable=True, **secure())
    assert op._backend_operator(op.launch).gpu_profile  # type: ignore[attr-defined]
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)  # type: ignore[arg-type]
    [first] = jobs(emulator)
    assert_secure(batch.api_client.sanitize_for_serialization(batch.read_namespaced_job(first, "default"))["spec"]
                  ["template"])  # fmt: skip
    trigger = deferred.value.trigger

    async def until_the_end() -> dict[str, Any]:
        async def event() -> dict[str, Any]:
            async for fired in trigger.run():
                return dict(fired.payload)
            raise AssertionError("no event")

        waiting = asyncio.create_task(event())
        victim = await asyncio.to_thread(running_rank, emulator, first, 1)
        await asyncio.to_thread(emulator.preempt, victim, "default", 0)
        replacement = await asyncio.to_thread(running_rank, emulator, f"{first}-r1", 0)
        pod = await asyncio.to_thread(core(emulator).read_namespaced_pod, replacement, "default")
        assert_secure(core(emulator).api_client.sanitize_for_serialization(pod))
        return await asyncio.wait_for(waiting, 90)

    payload = asyncio.run(until_the_end())
    assert payload["job"] == f"{first}-r1", payload
    resumed = training("default", seconds=6, deferrable=True, **secure())
    assert resumed.resume_execution(RESUME_METHOD, {"event": payload}, ctx) == {"loss": 0.25}  # type: ignore[arg-type]

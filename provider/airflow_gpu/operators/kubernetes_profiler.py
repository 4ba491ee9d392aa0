"""How ``GPUKubernetesOperator``'s pods start the profiler, and the next way when their image cannot.

Profiling (on by default) wraps ``cmds``; the wrapper's first program is ``/bin/sh``. An image without
it (distroless: ``gcr.io/distroless/python3``, ``nvcr.io/nvidia/distroless/python``) cannot start the
container: containerd ends it ``StartError`` (exit code 128), CRI-O leaves it waiting
``CreateContainerError`` (``spot.start_failure`` reads both). A job that runs fine unprofiled must never
be broken by profiling, so such a pod is not a failure, a preemption or a retry: the same pod is started
again with the next form (``profiling.wrapper_forms``: ``python3`` alone with the profiler's code in the
environment, then unprofiled), with a note in the task log and in XCom ``gpu_profile``'s "why not
profiled". The deferred task's trigger does the same itself (``triggers.pod_replacement``).

The form an image needs rides in the run's state (``SpotRun.profiler_forms``: through deferrals and on
every pod), and is kept in the task state store (``FORMS_KEY``, Airflow 3.3+) so that the task's later
tries start with it instead of failing to start first (``operators.profiler_forms``, shared with AWS Batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes.client import models as k8s

from airflow_gpu.operators.gpu_profile import publish_profile, wrapped
from airflow_gpu.operators.profiler_forms import FORMS_KEY, recall, remember
from airflow_gpu.profiling import bundle, wrapper_forms
from airflow_gpu.spot.start_failure import missing_program, names_program

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

__all__ = ["FORMS_KEY", "NO_CMDS", "fall_back", "publish", "recall", "remember", "wrap"]

NO_CMDS = "the pod ran the image's own entrypoint (no `cmds`), which cannot be wrapped"


def wrap(op: GPUKubernetesOperator, container: k8s.V1Container, context: Context | None) -> dict[str, str]:
    """The base container's command under the profiler, in the form its image needs; returns the variables
    that form needs in the container (the profiler's code for the python3 form)."""
    if not container.command:
        op.log.warning("gpu_profile needs `cmds`: the image's own entrypoint cannot be wrapped; not profiling")
        return {}
    recall(op, context)
    form = wrapper_forms.recorded(op.spot_run.profiler_forms, str(container.image))
    command = [*container.command, *(container.args or [])]
    if form == wrapper_forms.NONE:
        return {}
    container.args = None
    if form == wrapper_forms.PYTHON:
        container.command = bundle.wrap_python(command)
        return bundle.environment()
    container.command = wrapped(command, op.profile_interval)
    return {}


def fall_back(op: GPUKubernetesOperator, context: Context, ended: dict[str, Any] | None) -> bool:
    """Whether the ended pod could not start because its image lacks the wrapper's program: the next form is
    recorded and kept, the pod (one CRI-O keeps pending) deleted, and the run goes on unchanged (no
    interruption, no retry spent) for the caller to start the pod again."""
    if not op.gpu_profile or not op.cmds or ended is None:
        return False
    program = missing_program(ended, op.base_container_name)
    containers = (ended.get("spec") or {}).get("containers") or []
    base: dict[str, Any] = next((c for c in containers if c.get("name") == op.base_container_name), {})
    form = wrapper_forms.form_of(base.get("command"))
    if program is None or form is None or not names_program(program, form):
        return False
    image = str(base.get("image"))
    new = wrapper_forms.next_form(form)
    op.spot_run.profiler_forms[image] = new
    remember(op, context)
    name = (ended.get("metadata") or {}).get("name")
    op.log.warning("GPU profile: pod %s could not start (its image has no %s); %s; starting it again", name,
                   program, wrapper_forms.note(image, new))  # fmt: skip
    if ((ended.get("status") or {}).get("phase")) not in ("Succeeded", "Failed"):  # CRI-O retries it for ever
        namespace = (ended.get("metadata") or {}).get("namespace")
        op.reads.delete_and_wait(k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace)))
    op.spot_run.resubmit_unchanged()
    op.pod = op.pod_request_obj = op.remote_pod = None
    return True


def publish(op: GPUKubernetesOperator, context: Context, pod_name: str | None, node: str | None) -> None:
    """XCom ``gpu_profile`` for the ended pod; one that ran unprofiled says why."""
    if not op.gpu_profile:
        return
    remember(op, context)  # the trigger may have found a form: the next try starts with it
    instance_type, capacity = op.reads.node_facts(node)
    output, unread = op._output, op._unread
    form = wrapper_forms.recorded(op.spot_run.profiler_forms, op.images[op.spot_run.placement.candidate])
    if not op.cmds:  # see ``wrap``: the image's own entrypoint ran, unprofiled
        output, unread = None, NO_CMDS
    elif form == wrapper_forms.NONE:
        output, unread = None, wrapper_forms.note(op.images[op.spot_run.placement.candidate], form)
    publish_profile(
        context, output, run=op.spot_run, accelerator=op.accelerator, workload=pod_name,
        instance_type=instance_type, capacity=capacity, log=op.log, unread=unread,
    )  # fmt: skip

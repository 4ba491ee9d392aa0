"""The pod of ``GPUKubernetesOperator``'s current placement: KPO's pod, dressed for the GPU and the spot run.

Building is kept apart from running, as cncf-kubernetes keeps ``pod_generator`` apart from
``pod_manager``. KPO builds the pod from the user's (rendered) arguments; here the placement of the
run's current candidate and capacity goes on top (``accelerators.kubernetes`` for the spec,
``utils.kubernetes.add_placement`` so that a user's tolerations, volumes or affinity add to the
GPU ones), with the candidate's image, the run's environment (every variable once), the profiler
around the command, a ``preStop`` hook that writes the spot notice, the labels the shared watch
selects on, the run's state as an annotation, read back when a retry reattaches to the pod, and
the task try's exact identity (``airflow-gpu reap`` asks Airflow about it).
The operator's own fields are never rewritten between pods.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import add_unique_suffix
from kubernetes.client import models as k8s

from airflow_gpu.accelerators.kubernetes import KubernetesPlacement, to_kubernetes
from airflow_gpu.operators import kubernetes_profiler
from airflow_gpu.operators.gpu_profile import ENV_SPOT_NOTICE, profiler_environment
from airflow_gpu.profiling.termination import (
    ENV_TERMINATION_BYTES,
    ENV_TERMINATION_LOG,
    MAX_MESSAGE_BYTES,
    MAX_POD_MESSAGE_BYTES,
)
from airflow_gpu.spot.policy import Capacity
from airflow_gpu.triggers.pod_replacement import SPOT_NOTICE_PATH, notice_hook
from airflow_gpu.utils.end_hold import END_HOLD
from airflow_gpu.utils.kubernetes import add_placement
from airflow_gpu.utils.pod_identity import TASK_ANNOTATION, task_annotation

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator

#: Pod annotation holding the run's state, read back when a retry reattaches to the pod.
STATE_ANNOTATION = "airflow-gpu/state"
#: The API server's default ``terminationMessagePath``.
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def placement(op: GPUKubernetesOperator, candidate: int, capacity: Capacity | None) -> KubernetesPlacement:
    """The spec's pod parts for a candidate, from the rendered ``cpu`` and ``memory``."""
    return to_kubernetes(
        op.candidates[candidate],
        cpu=op.cpu,
        memory=op.memory,
        shared_memory=op.shared_memory,
        capacity=capacity,
        label_scheme=op.node_label_scheme,
        mig_strategy=op.mig_strategy,
    )


def dress(op: GPUKubernetesOperator, pod: k8s.V1Pod, context: Context | None) -> k8s.V1Pod:
    """KPO's pod with the placement added, the run's environment, the spot-notice hook and state."""
    run = op.spot_run
    candidate = run.placement.candidate
    container = next(c for c in pod.spec.containers if c.name == op.base_container_name)
    container.image = op.images[candidate]
    add_placement(pod, container, placement(op, candidate, run.placement.capacity))
    pod.metadata.name = _pod_name(op, pod.metadata.name, context)
    notice_file = SPOT_NOTICE_PATH.format(pod=pod.metadata.name)
    env = {**run.environment(), ENV_SPOT_NOTICE: notice_file}
    if op.gpu_profile:  # in the form the image needs (``kubernetes_profiler``), with what that form reads
        env |= profiler_environment(op.profile_interval, run.capacity)
        env |= kubernetes_profiler.wrap(op, container, context)
        # where the profiler leaves the result and the exit for the pod's status (``profiling.termination``)
        env[ENV_TERMINATION_LOG] = container.termination_message_path or DEFAULT_TERMINATION_LOG
        env[ENV_TERMINATION_BYTES] = str(message_budget(pod))
    kept = [e for e in container.env or [] if e.name not in env]  # every variable once
    container.env = [*kept, *(k8s.V1EnvVar(name=k, value=v) for k, v in env.items())]
    if container.lifecycle is None:
        container.lifecycle = k8s.V1Lifecycle(
            pre_stop=k8s.V1LifecycleHandler(_exec=k8s.V1ExecAction(command=notice_hook(notice_file)))
        )
    pod.metadata.labels = {
        **(pod.metadata.labels or {}),
        "airflow-gpu/accelerator": op.accelerator.type.lower(),
        "airflow-gpu/capacity": run.capacity,
    }
    annotations = {**(pod.metadata.annotations or {}), STATE_ANNOTATION: json.dumps(run.to_json())}
    if context is not None:  # the try's exact identity: ``airflow-gpu reap`` asks Airflow about it
        annotations[TASK_ANNOTATION] = task_annotation(context["ti"])
    pod.metadata.annotations = annotations
    if op.keep_until_read and END_HOLD not in (pod.metadata.finalizers or []):  # kept until read (``end_hold``)
        pod.metadata.finalizers = [*(pod.metadata.finalizers or []), END_HOLD]
    return pod


def message_budget(pod: k8s.V1Pod) -> int:
    """The bytes of a termination message the kubelet keeps whole: its last 4096, then each container's share of
    12 KiB for the pod, counted with two more containers than the spec has (a mesh's webhook injects an init
    container and a proxy, as Istio does, after the operator built the pod)."""
    containers = len(pod.spec.containers or []) + len(pod.spec.init_containers or []) + 2
    return min(MAX_MESSAGE_BYTES, MAX_POD_MESSAGE_BYTES // containers)


def _pod_name(op: GPUKubernetesOperator, built: str, context: Context | None) -> str:
    """A mapped instance's pods carry its map index, in every process (deferrals included)."""
    map_index = getattr(context["ti"], "map_index", None) if context else None
    if map_index is None or map_index < 0 or not op.name:
        return built
    name = f"{op.name}-{map_index}"
    return add_unique_suffix(name=name) if op.random_name_suffix else name

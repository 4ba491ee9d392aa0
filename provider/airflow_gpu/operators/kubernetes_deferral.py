"""What a deferred ``GPUKubernetesOperator`` hands its trigger so the triggerer can carry the spot run on.

The trigger (``triggers.pod_replacement``) creates the next pod itself after an interruption, so it
needs the pod of every placement the policy may move to: each candidate accelerator on the
requested capacity and on on-demand. They are built here, on the worker, by the operator's own
``build_pod_request_obj`` (the user's rendered arguments, the GPU placement, the profiler, the
spot-notice hook), once per placement, and carried as one pod plus a delta per other placement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_gpu.triggers.pod_replacement import NAME_TOKEN, SPOT_NOTICE_PATH, notice_hook, placement_key
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.manifest_delta import delta

if TYPE_CHECKING:
    from airflow.sdk import Context
    from kubernetes.client import models as k8s

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator


def pod_manifest(pod: k8s.V1Pod) -> dict[str, Any]:
    """The pod as the trigger carries it: ``NAME_TOKEN`` for its name, where the name is the pod's own.

    That is ``metadata.name`` and the spot notice's path (the base container's variable and the
    ``preStop`` hook ``kubernetes_pod.dress`` wrote), set field by field: the same text elsewhere (a
    ``task_id`` label, ``python train.py``, a volume) is the user's and stays as it is.
    """
    manifest: dict[str, Any] = to_dict(pod)
    metadata = manifest.setdefault("metadata", {})
    own, token = SPOT_NOTICE_PATH.format(pod=metadata.get("name")), SPOT_NOTICE_PATH.format(pod=NAME_TOKEN)
    metadata["name"] = NAME_TOKEN
    for container in (manifest.get("spec") or {}).get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("value") == own:
                variable["value"] = token
        hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
        if hook.get("command") == notice_hook(own):
            hook["command"] = notice_hook(token)
    return manifest


def replacement_plan(
    operator: GPUKubernetesOperator,
    context: Context,
    first_name: str,
    manifest: Callable[[k8s.V1Pod], dict[str, Any]] = pod_manifest,
) -> dict[str, Any]:
    """The trigger's ``gpu_spot`` argument: the policy, the run's state and the workloads it may create.

    ``manifest`` turns each placement's pod into what the trigger creates: the pod itself, or a
    training Job and its Service built from it (``operators.accelerate_kubernetes``).
    """
    run = operator.spot_run
    saved = run.to_json()
    pods: dict[str, Any] = {}
    try:
        for placement in run.reachable_placements():
            run.move_to(placement)
            pod = operator.build_pod_request_obj(context)
            pods[placement_key(placement.candidate, placement.capacity)] = manifest(pod)
    finally:
        run.restore(saved)
    base_key = placement_key(run.placement.candidate, run.placement.capacity)
    base = pods.pop(base_key)
    return {
        "policy": operator.spot.model_dump(),
        "candidates": list(run.candidates),
        "requested_capacity": run.requested_capacity,
        "state": run.to_json(),
        "base": base,
        "base_key": base_key,
        "deltas": {key: delta(base, pod) for key, pod in pods.items()},
        "first_name": first_name,
    }

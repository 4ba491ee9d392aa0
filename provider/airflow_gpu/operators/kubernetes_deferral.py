"""What a deferred ``GPUKubernetesOperator`` hands its trigger so the triggerer can carry the spot run on.

The trigger (``triggers.pod_replacement``) creates the next pod itself after an interruption, so it
needs the pod of every placement the policy may move to: each candidate accelerator on the
requested capacity and on on-demand. They are built here, on the worker, by the operator's own
``build_pod_request_obj`` (the user's rendered arguments, the GPU placement, the profiler, the
spot-notice hook), once per placement, and carried as one pod plus a delta per other placement.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from airflow_gpu.spot.policy import Placement
from airflow_gpu.triggers.pod_replacement import NAME_TOKEN, placement_key
from airflow_gpu.utils.kubernetes import to_dict
from airflow_gpu.utils.manifest_delta import delta

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.kubernetes import GPUKubernetesOperator


def placements(operator: GPUKubernetesOperator) -> list[Placement]:
    """Every placement the spot policy can move the run to, the current one first."""
    run = operator.spot_run
    capacities = [run.requested_capacity]
    if operator.spot.fallback_to_on_demand and run.requested_capacity is not None:
        capacities.append("on-demand")
    found = [run.placement]
    for candidate in range(len(operator.candidates)):
        for capacity in dict.fromkeys(capacities):
            if Placement(candidate, capacity) not in found:
                found.append(Placement(candidate, capacity))
    return found


def replacement_plan(operator: GPUKubernetesOperator, context: Context, first_name: str) -> dict[str, Any]:
    """The trigger's ``gpu_spot`` argument: the policy, the run's state and the pods it may create."""
    run = operator.spot_run
    saved = run.to_json()
    pods: dict[str, Any] = {}
    try:
        for placement in placements(operator):
            run.move_to(placement)
            pod = operator.build_pod_request_obj(context)
            text = json.dumps(to_dict(pod)).replace(pod.metadata.name, NAME_TOKEN)
            pods[placement_key(placement.candidate, placement.capacity)] = json.loads(text)
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

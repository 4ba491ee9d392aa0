"""One AWS Batch submission, built from the task's rendered arguments and the run's placement.

Each SubmitJob of a task try is built afresh here from what the user gave (rendered by Airflow)
and the candidate the spot run chose, so a resubmission can never carry the previous candidate's
resource requirements or the environment twice: nothing is accumulated on the operator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_gpu.accelerators.batch import BatchPlacement
from airflow_gpu.utils.pod_identity import identity_mismatch

#: Job tags that carry the task try's identity, checked before a retry reattaches.
IDENTITY_TAGS = ("airflow-gpu/dag", "airflow-gpu/task", "airflow-gpu/run", "airflow-gpu/map-index")
TRY_TAG = "airflow-gpu/try"
#: SubmitJob arguments taken as ``BatchOperator`` has them (rendered), keyed by the API's names.
PASSED_THROUGH = {
    "arrayProperties": "array_properties",
    "parameters": "parameters",
    "ecsPropertiesOverride": "ecs_properties_override",
    "eksPropertiesOverride": "eks_properties_override",
    "nodeOverrides": "node_overrides",
    "retryStrategy": "retry_strategy",
    "shareIdentifier": "share_identifier",
    "schedulingPriorityOverride": "scheduling_priority_override",
}


def batch_name(*parts: str) -> str:
    """A Batch name: letters, digits, hyphens and underscores, at most 128 characters."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", "--".join(parts))[:128]


def job_name(rendered: str, map_index: int | None) -> str:
    """The user's (rendered) job name; a mapped instance's gets ``-m<index>`` so the console tells them apart."""
    mapped = map_index is not None and map_index >= 0
    return batch_name(f"{rendered}-m{map_index}" if mapped else rendered)


#: ECS refuses a task whose container overrides (command, environment...) are longer than this, as
#: JSON: the job fails once it would start, long after SubmitJob accepted it.
MAX_OVERRIDES_CHARS = 8192


def job_definition(
    image: str,
    placement: BatchPlacement,
    retry: Mapping[str, Any],
    accelerator: str,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """RegisterJobDefinition's arguments (without the name) for one candidate.

    The command is not part of it: a templated or mapped command would register a new revision
    per run or per map index. It travels in each job's container overrides instead. What is the
    same for every job and too big for the overrides (the profiler's code) is ``environment``.
    """
    container: dict[str, Any] = {
        "image": image,
        "resourceRequirements": placement.resource_requirements,
        "linuxParameters": placement.linux_parameters,
    }
    if environment:
        container["environment"] = [{"name": k, "value": v} for k, v in environment.items()]
    return {
        "type": "container",
        "containerProperties": container,
        "retryStrategy": dict(retry),
        "propagateTags": True,
        "tags": {"airflow-gpu/accelerator": accelerator},
    }


def container_overrides(
    user: Mapping[str, Any] | None,
    environment: Mapping[str, str],
    run_environment: Mapping[str, str],
    placement: BatchPlacement,
    command: list[str] | None,
    on_user_definition: bool,
) -> dict[str, Any]:
    """The user's container overrides plus the spec's; every variable once, the run's last.

    The command is always here (unless the overrides already name one). On the user's own job
    definition the spec travels here too: the candidate's GPUs always, its vCPUs and memory unless
    the user's overrides name them.
    """
    overrides: dict[str, Any] = dict(user or {})
    env = {e["name"]: e["value"] for e in overrides.get("environment") or []}
    env.update({**environment, **run_environment})
    overrides["environment"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    if on_user_definition:
        given = {r["type"]: r for r in overrides.get("resourceRequirements") or [] if r["type"] != "GPU"}
        spec = [r for r in placement.resource_requirements if r["type"] not in given]
        overrides["resourceRequirements"] = [*spec, *given.values()]
    if command and "command" not in overrides:
        overrides["command"] = list(command)
    return overrides


def overrides_too_long(overrides: Mapping[str, Any]) -> str | None:
    """Why ECS would refuse these container overrides (None when it would not)."""
    import json

    length = len(json.dumps(overrides, separators=(",", ":")))
    if length <= MAX_OVERRIDES_CHARS:
        return None
    return (
        f"the job's container overrides are {length} characters, ECS allows {MAX_OVERRIDES_CHARS}: the job "
        "would be accepted and then fail; shorten the command or environment, or move them to your job definition"
    )


def identity_tags(ti: Any) -> dict[str, str]:
    """The tags a job carries so that only this task try's retry takes it over (``ti``: the task instance)."""
    map_index = getattr(ti, "map_index", -1)
    return {
        "airflow-gpu/dag": ti.dag_id,
        "airflow-gpu/task": ti.task_id,
        "airflow-gpu/run": str(ti.run_id)[:256],
        "airflow-gpu/map-index": str(-1 if map_index is None else map_index),
        TRY_TAG: str(ti.try_number),
    }


def identity_problem(tags: Mapping[str, str], ti: Any) -> str | None:
    """Why a job's tags say it is not this task try's to take over (None when it is): the same
    fence as for pods, a later try's job is never an earlier try's."""
    expected = identity_tags(ti)
    return identity_mismatch(
        tags,
        None,
        expected={k: expected[k] for k in IDENTITY_TAGS},
        try_number=ti.try_number,
        try_key=TRY_TAG,
    )

"""A training Job's names and manifests: the Indexed Job and its headless Service, as API dicts.

Built from the pod ``GPUKubernetesOperator`` would create (placement, spot environment, profiler,
spot-notice hook), so that one machine and many look alike on the nodes. Written once, used by
the worker for the Jobs it creates and, through the manifests it carries, by the triggerer for the
Jobs it creates after an interruption.

Names are deterministic per task try and submission: ``<name>-<digest>`` for the first Job of a
try, ``-r<N>`` appended for the N-th replacement, where the digest is the task try's identity
(dag, task, run, map index, try). A trigger that runs twice (two triggerers, apache/airflow#37180)
or again after a restart therefore meets the Job it already created (409) instead of creating a
second, and a later try's Jobs never take an earlier try's names. Pure: no Airflow, no client.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The label that ties a training Job's pods (and its Service) to the Job.
JOB_LABEL = "airflow-gpu/training-job"
#: The environment variable holding the main machine's address, ``<job>-0.<service>``.
ENV_MAIN_ADDRESS = "AIRFLOW_GPU_MAIN_PROCESS_IP"
#: Annotation holding the spot run's state as of the Job's submission (``GPUKubernetesOperator``'s).
STATE_ANNOTATION = "airflow-gpu/state"
#: Stands for the Job's name in the manifests the trigger carries.
NAME_TOKEN = "airflow-gpu-job-name"
#: A Job's name: its pods are ``<job>-<index>-<5 characters>`` and their hostname ``<job>-<index>``
#: (a DNS label, at most 63 characters), so at most 47 leaves room for the index.
MAX_NAME = 47
#: The first Job's name, leaving room for ``-r<N>`` up to 99,999 replacements.
MAX_BASE = 40
#: How long deleting a Job may take to remove its pods (their grace period comes on top).
DELETE_WAIT_SECONDS = 60.0
#: ``ttlSecondsAfterFinished`` of every training Job: the TTL controller deletes a finished Job (and, in
#: the foreground, its pods) this long after it ended, should the task not (a worker lost for good, a
#: deletion that failed). A day leaves a retry's take-over (``training_job_reattach``) ample time to read
#: a complete Job's result; a finished Job's pods hold no GPUs meanwhile.
JOB_TTL_SECONDS = 24 * 3600
#: Where ``GPUKubernetesOperator`` puts a pod's spot notice; the Job's name replaces the pod's there.
NOTICE_DIRECTORY = "/tmp/airflow-gpu/{name}/"


def dns_label(text: str, limit: int) -> str:
    """A DNS-1035 label (a Service name): lower case, a letter first, at most ``limit`` characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not label or not label[0].isalpha():
        label = "t-" + label
    return label[:limit].rstrip("-")


def base_name(name: str, identity: Sequence[object]) -> str:
    """The first Job's name for a task try: ``name`` (the operator's ``name``) and the try's digest."""
    digest = hashlib.sha256("/".join(str(part) for part in identity).encode()).hexdigest()[:8]
    return f"{dns_label(name, MAX_BASE - len(digest) - 1)}-{digest}"


def job_name(base: str, submission: int) -> str:
    """The Job of the try's ``submission`` (0: the first)."""
    return base if submission == 0 else f"{base}-r{submission}"


def job_manifests(
    pod: Mapping[str, Any],
    name: str,
    *,
    machines: int,
    port: int,
    base_container: str,
    active_deadline_seconds: int | None = None,
) -> dict[str, dict[str, Any]]:
    """``{"job": ..., "service": ...}`` for one training, from the pod of one machine (an API dict).

    The Job is Indexed (``completions = parallelism = machines``) with ``backoffLimit: 0``: a rank
    that dies (a spot reclaim) ends the whole Job, since the other ranks cannot go on without it;
    what comes next is the spot run's decision. Each pod's hostname is ``<job>-<index>`` and its
    subdomain the Service, so ``<job>-0.<job>`` is the main machine. The Service publishes
    not-ready addresses so that the other machines resolve the main one while it starts. The pod's
    finalizers go to the template, which the Job controller copies onto each pod
    (``GetPodFromTemplate``): the provider's end hold keeps a machine until its end is read.
    """
    pod_name = (pod.get("metadata") or {}).get("name") or ""
    text = json.dumps(pod)
    if pod_name:  # the spot-notice path names the pod; each submission's Job names its own
        text = text.replace(NOTICE_DIRECTORY.format(name=pod_name), NOTICE_DIRECTORY.format(name=name))
    source = json.loads(text)
    metadata, spec = source.get("metadata") or {}, source.get("spec") or {}
    for container in spec.get("containers") or []:
        if container.get("name") == base_container:
            env = [e for e in container.get("env") or [] if e.get("name") != ENV_MAIN_ADDRESS]
            container["env"] = [*env, {"name": ENV_MAIN_ADDRESS, "value": f"{name}-0.{name}"}]
    spec.pop("hostname", None)
    spec.update(subdomain=name, restartPolicy="Never")
    labels = {**(metadata.get("labels") or {}), JOB_LABEL: name}
    annotations = dict(metadata.get("annotations") or {})
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": machines,
        "parallelism": machines,
        "backoffLimit": 0,  # one rank lost ends the Job; the spot run decides what comes next
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS,  # a backstop: the task deletes its Jobs itself
        "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
    }
    if finalizers := metadata.get("finalizers"):  # the Job controller gives them to each pod (``end_hold``)
        job_spec["template"]["metadata"]["finalizers"] = list(finalizers)
    if active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = active_deadline_seconds
    namespace = metadata.get("namespace")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": job_spec,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": dict(annotations)},
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: name},
            "publishNotReadyAddresses": True,  # the main machine resolves while it starts
            "ports": [{"name": "rendezvous", "port": port}],
        },
    }
    return {"job": job, "service": service}


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ownerReferences`` entry naming the Job (by uid): its Service goes with it (the garbage collector)."""
    metadata = job.get("metadata") or {}
    return {"apiVersion": "batch/v1", "kind": "Job", "name": metadata.get("name"), "uid": metadata.get("uid")}


def owned_by(manifest: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest with ``owner`` as its only owner."""
    result = copy.deepcopy(dict(manifest))
    result.setdefault("metadata", {})["ownerReferences"] = [dict(owner)]
    return result


def with_state(manifests: Mapping[str, dict[str, Any]], state: Mapping[str, Any], environment: Mapping[str, str],
               base_container: str) -> dict[str, dict[str, Any]]:  # fmt: skip
    """The manifests with the spot run's state (annotation on the Job, its pods and its Service) and its
    environment in the base container: what a replacement carries of the run."""
    result = copy.deepcopy(dict(manifests))
    text = json.dumps(dict(state))
    job = result["job"]
    template = job["spec"]["template"]
    for metadata in (job["metadata"], template["metadata"], result["service"]["metadata"]):
        metadata.setdefault("annotations", {})[STATE_ANNOTATION] = text
        for server_owned in ("uid", "resourceVersion", "creationTimestamp"):
            metadata.pop(server_owned, None)
    for container in template["spec"].get("containers") or []:
        if container.get("name") == base_container:
            env = [e for e in container.get("env") or [] if e.get("name") not in environment]
            container["env"] = [*env, *({"name": k, "value": v} for k, v in environment.items())]
    return result


def saved_state(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spot run's state a Job or Service carries (``STATE_ANNOTATION``), if readable."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(STATE_ANNOTATION)
    try:
        state = json.loads(text) if text else None
    except (TypeError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def newest(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The object of the latest submission among a task's Jobs and Services (by the state they carry)."""
    ranked = [(int((saved_state(o) or {}).get("submissions") or 0), o) for o in objects]
    return max(ranked, key=lambda item: item[0])[1] if ranked else None

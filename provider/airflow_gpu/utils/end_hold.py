"""A finalizer that keeps a GPU pod in the API until the provider has read how it ended.

A pod that succeeded can be deleted before anyone read its end: its spot node reclaimed and PodGC
deleting the node's pods, a drain, a person. A task that waits on its worker follows the pod and
usually sees the success first. A deferred task has only its trigger, and a killed triggerer leaves
its triggers unowned until another triggerer takes them (``triggerer_health_check_threshold``, 30 s):
a pod that succeeded and was deleted meanwhile is gone with its end when the trigger comes back,
which cannot be told from a reclaim, so the workload ran again (the soak, seed 463621002: shards
re-run 25 to 35 s after their success, both triggerers killed in turn). The Job controller keeps
its pods for the same reason with a finalizer (``batch.kubernetes.io/job-tracking``); this is the
provider's.

Every pod ``GPUKubernetesOperator`` creates carries ``END_HOLD``. A deletion then only marks the pod
(``deletionTimestamp``): the kubelet stops its containers as for any deletion, but the object, its
phase, its container states and their termination messages (the result line and the command's end,
``profiling.termination``) stay until the provider removes the finalizer: before each delete it
makes, when a try is done with a pod, and in ``airflow-gpu reap`` for a try that died. A pod that
ended ``Succeeded`` while being deleted is no success when the profiler saw the deletion's signal
(``spot.classifier.ended_on_a_deletion_signal``).

What it costs: one PATCH per pod when the task is done with it (``patch`` on pods, which KPO needs
already), and a ``kubectl delete pod`` of a pod whose task is not running waits until ``reap``
(or a ``kubectl patch`` that removes the finalizer) lets it go, as a Job's pods wait for their controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The finalizer (the provider's prefix, as its labels and annotations carry it).
END_HOLD = "airflow-gpu/end-unread"
#: The strategic merge patch that removes it and nothing else (``ObjectMeta.finalizers`` merges as a set).
RELEASE_PATCH: dict[str, Any] = {"metadata": {"$deleteFromPrimitiveList/finalizers": [END_HOLD]}}
#: Named, not left to the sync ``kubernetes`` client's choice (it picks JSON patch for the content type, then
#: its REST layer swaps in a strategic merge for a dict body): the patch says what it is.
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def held(pod: Any) -> bool:
    """Whether the pod (a ``V1Pod`` or an API dict) still carries the finalizer."""
    if isinstance(pod, Mapping):
        return END_HOLD in ((pod.get("metadata") or {}).get("finalizers") or ())
    return END_HOLD in (getattr(getattr(pod, "metadata", None), "finalizers", None) or ())


def release(client: Any, name: str, namespace: str, log: Any) -> None:
    """Remove the finalizer through the sync client (``CoreV1Api``), asked again as ``api_retry`` does; a pod
    gone already is fine. A pod being deleted goes once its grace period is over (at once after the
    kubelet's final delete)."""
    from kubernetes.client.exceptions import ApiException

    from airflow_gpu.utils.api_retry import call

    try:
        call(lambda: client.patch_namespaced_pod(name, namespace, RELEASE_PATCH, _content_type=STRATEGIC_MERGE),
             f"releasing pod {namespace}/{name}", log=log)  # fmt: skip
    except ApiException as error:
        if error.status != 404:
            raise


def released(client: Any, pod: Any, log: Any) -> None:
    """``release`` for a ``V1Pod`` that carries the finalizer as last read; nothing for one that does not."""
    if pod is not None and held(pod):
        release(client, pod.metadata.name, pod.metadata.namespace, log)


def release_quietly(client: Any, name: str, namespace: str, log: Any) -> None:
    """``release``, where a failure costs only the hold (the pod was deleted or left first): a warning that
    ``airflow-gpu reap`` lets it go."""
    try:
        release(client, name, namespace, log)
    except Exception as error:
        log.warning("Could not release pod %s/%s (%s: %s); airflow-gpu reap will", namespace, name,
                    type(error).__name__, error)  # fmt: skip

"""Hand a ``KubernetesPlacement`` to ``KubernetesPodOperator``.

The core speaks Kubernetes API dicts; KPO builds ``kubernetes.client`` models. This module
converts between them with the client's own (de)serialiser (the one KPO uses for ``affinity``
dicts), so every field name is checked against the API model instead of being copied by hand,
and adds a placement to a pod KPO built (``accelerators.pod_merge``).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

try:
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.client import models as k8s
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "airflow_gpu.utils.kubernetes needs the Kubernetes client: pip install 'airflow-provider-gpu[kubernetes]'"
    ) from error

from airflow_gpu.accelerators import pod_merge
from airflow_gpu.accelerators.kubernetes import KubernetesPlacement


class _Deserializer(ApiClient):  # type: ignore[misc]
    """The client's deserialiser, with API timestamps read by ``datetime.fromisoformat``.

    The client parses each one with dateutil (0.6 ms): a deferred pod's status holds a dozen, and a
    triggerer turns one into a model per pod change, thousands a minute in a fan-out. RFC 3339 as
    the API server writes it (``2026-11-26T07:00:00Z``, fractions allowed) is what
    ``fromisoformat`` reads since Python 3.11; anything else still goes to dateutil.
    """

    def _ApiClient__deserialize_datetime(self, string: Any) -> Any:  # the mangled name it overrides
        try:
            return datetime.fromisoformat(string)
        except (TypeError, ValueError):
            return super()._ApiClient__deserialize_datetime(string)


@cache
def _api_client() -> ApiClient:
    """One client for deserialising: building a ``Configuration`` per call costs ~1 ms per task."""
    return _Deserializer(configuration=Configuration())


def configuration() -> Configuration:
    """The deserialiser's ``Configuration``, for models built by hand: a model built without one
    copies the default configuration (0.7 ms each)."""
    return _api_client().configuration


def to_model(data: dict[str, Any], model: type[Any]) -> Any:
    """A ``kubernetes.client`` model from an API dict (camelCase keys)."""
    return _api_client()._ApiClient__deserialize_model(data, model)


def to_dict(model: Any) -> Any:
    """An API dict (camelCase keys) from a ``kubernetes.client`` model, a list of them, or None."""
    return _api_client().sanitize_for_serialization(model)


def pod_operator_arguments(placement: KubernetesPlacement) -> dict[str, Any]:
    """``KubernetesPodOperator`` keyword arguments that apply a placement."""
    return {
        "container_resources": to_model(placement.resources, k8s.V1ResourceRequirements),
        "affinity": None if placement.affinity is None else to_model(placement.affinity, k8s.V1Affinity),
        "tolerations": [to_model(t, k8s.V1Toleration) for t in placement.tolerations],
        "volumes": [to_model(v, k8s.V1Volume) for v in placement.volumes],
        "volume_mounts": [to_model(m, k8s.V1VolumeMount) for m in placement.volume_mounts],
    }


def add_placement(pod: k8s.V1Pod, container: k8s.V1Container, placement: KubernetesPlacement) -> None:
    """Add the placement to a pod KPO built from the user's arguments; the user wins where both set a key."""
    container.resources = to_model(
        pod_merge.merge_resources(placement.resources, to_dict(container.resources)), k8s.V1ResourceRequirements
    )
    mounts = pod_merge.merge_mounts(placement.volume_mounts, to_dict(container.volume_mounts))
    container.volume_mounts = [to_model(m, k8s.V1VolumeMount) for m in mounts]
    pod.spec.volumes = [
        to_model(v, k8s.V1Volume) for v in pod_merge.merge_volumes(placement.volumes, to_dict(pod.spec.volumes))
    ]
    tolerations = pod_merge.merge_tolerations(placement.tolerations, to_dict(pod.spec.tolerations))
    pod.spec.tolerations = [to_model(t, k8s.V1Toleration) for t in tolerations]
    affinity = pod_merge.merge_affinity(placement.affinity, to_dict(pod.spec.affinity))
    pod.spec.affinity = to_model(affinity, k8s.V1Affinity) if affinity else None

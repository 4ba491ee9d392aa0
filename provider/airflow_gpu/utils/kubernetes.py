"""Hand a ``KubernetesPlacement`` to ``KubernetesPodOperator``.

The core speaks Kubernetes API dicts; the operator wants ``kubernetes.client`` models for
resources, volumes and mounts. This module does that conversion with the client's own
deserialiser (the one KPO uses for ``affinity`` dicts), so every field name is checked against
the API model instead of being copied by hand.
"""

from __future__ import annotations

from functools import cache
from typing import Any

try:
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.client import models as k8s
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "airflow_gpu.utils.kubernetes needs the Kubernetes client: pip install 'airflow-provider-gpu[kubernetes]'"
    ) from error

from airflow_gpu.accelerators.kubernetes import KubernetesPlacement


@cache
def _api_client() -> ApiClient:
    """One client for deserialising: building a ``Configuration`` per call costs ~1 ms per task."""
    return ApiClient(configuration=Configuration())


def to_model(data: dict[str, Any], model: type[Any]) -> Any:
    """A ``kubernetes.client`` model from an API dict (camelCase keys)."""
    return _api_client()._ApiClient__deserialize_model(data, model)


def pod_operator_arguments(placement: KubernetesPlacement) -> dict[str, Any]:
    """``KubernetesPodOperator`` keyword arguments that apply a placement."""
    return {
        "container_resources": to_model(placement.resources, k8s.V1ResourceRequirements),
        "affinity": None if placement.affinity is None else to_model(placement.affinity, k8s.V1Affinity),
        "tolerations": [to_model(t, k8s.V1Toleration) for t in placement.tolerations],
        "volumes": [to_model(v, k8s.V1Volume) for v in placement.volumes],
        "volume_mounts": [to_model(m, k8s.V1VolumeMount) for m in placement.volume_mounts],
    }

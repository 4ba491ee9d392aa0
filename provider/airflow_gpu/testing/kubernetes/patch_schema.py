"""Each field's strategic-merge metadata, as the API server's strategic merge patch reads it.

``apimachinery/pkg/util/strategicpatch`` merges a list by the field's ``patchMergeKey`` when its
``patchStrategy`` is ``merge`` (containers, env, volumes, imagePullSecrets by ``name``; a
container's ports by ``containerPort``, its volumeMounts by ``mountPath``; a Service's ports by
``port``; hostAliases by ``ip``; topologySpreadConstraints by ``topologyKey``; ownerReferences by
``uid``; conditions by ``type``), unions a list of scalars with ``merge`` (``finalizers``) and
replaces every other list whole (tolerations, envFrom, args). The tags are Kubernetes' Go struct
tags, vendored in ``patch_strategies.json`` (``tools/k8s_patch_strategies.py``, the same data
``/openapi/v2`` serves as ``x-kubernetes-patch-merge-key``); the field types are the ``kubernetes``
client's models (``openapi_types``), as ``openapi`` builds the served schemas from them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import kubernetes.client as k8s_models

from airflow_gpu.testing.kubernetes.openapi import _TYPE, PATCH_STRATEGIES, definition_name


@dataclass(frozen=True)
class Field:
    """One property: the model of its value (of its items, for a list), and its patch tags."""

    model: str | None
    is_list: bool
    merge_key: str | None
    strategies: frozenset[str]

    @property
    def merges(self) -> bool:
        return "merge" in self.strategies


NO_FIELD = Field(None, False, None, frozenset())


@functools.cache
def fields(model: str) -> dict[str, Field]:
    """``{JSON name: Field}`` of a client model (``V1PodSpec``); empty for anything else."""
    cls = getattr(k8s_models, model, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        return {}
    tags = PATCH_STRATEGIES.get(definition_name(model), {})
    result = {}
    for attribute, python_type in cls.openapi_types.items():
        json_name = cls.attribute_map[attribute]
        match = _TYPE.match(python_type)
        is_list = python_type.startswith("list[")
        inner = (match.group(2) or match.group(3)) if match else python_type
        is_model = hasattr(k8s_models, inner) and hasattr(getattr(k8s_models, inner), "openapi_types")
        # a map of models (``dict[str, V1...]``) is not a model itself: its values are
        child = inner if is_model and (is_list or not match) else None
        tag = tags.get(json_name, {})
        strategies = frozenset(s for s in tag.get("x-kubernetes-patch-strategy", "").split(",") if s)
        result[json_name] = Field(child, is_list, tag.get("x-kubernetes-patch-merge-key"), strategies)
    return result


def field_of(model: str | None, name: str) -> Field:
    return fields(model).get(name, NO_FIELD) if model else NO_FIELD

"""The downward API: a pod's own field by its ``fieldPath``, as the kubelet resolves it.

Both of the kubelet's consumers read it: a container's ``env[].valueFrom.fieldRef`` (``kubelet.py``)
and the files of a ``downwardAPI`` or ``projected`` volume (``volumes.py``).
"""

from __future__ import annotations

from typing import Any


def field_ref(pod: dict[str, Any], path: str) -> str:
    """``metadata.name``, ``metadata.labels['x']``, ``status.podIP`` and so on; an unset field is empty."""
    if path.startswith(("metadata.labels['", "metadata.annotations['")) and path.endswith("']"):
        section, key = path[len("metadata.") :].split("['", 1)
        return str((pod["metadata"].get(section) or {}).get(key[:-2], ""))
    value: Any = pod
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)

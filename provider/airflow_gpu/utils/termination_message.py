"""A container's termination message as the pod's status holds it (``state.terminated.message``).

The profiler leaves the result line and the command's end there (``profiling.termination``): the
status outlives the log, which goes with the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def terminated_message(pod: Mapping[str, Any], container: str) -> str | None:
    """``state.terminated.message`` of ``container`` in the pod (an API dict), None without one."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            message = ((status.get("state") or {}).get("terminated") or {}).get("message")
            return message if isinstance(message, str) else None
    return None

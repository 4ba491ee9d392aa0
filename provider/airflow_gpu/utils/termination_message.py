"""A container's termination message as the pod's status holds it (``state.terminated.message``).

The profiler leaves the result line and the command's end there (``profiling.termination``): the
status outlives the log, which goes with the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def terminated_message(pod: Mapping[str, Any], container: str) -> str | None:
    """``state.terminated.message`` of ``container`` in the pod (an API dict) when it exited 0, None otherwise.

    The profiler writes only on exit 0; a failed container's message is the kubelet's (its log's tail with
    ``FallbackToLogsOnError``), where a line the workload printed must not pass for the profiler's."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            terminated = (status.get("state") or {}).get("terminated") or {}
            message = terminated.get("message")
            return message if isinstance(message, str) and terminated.get("exitCode") == 0 else None
    return None

"""What the container runtime starts for a container of an image declared to the emulator, and
containerd's refusal when the image lacks that first program (see ``images``' docstring).

A module of its own so that the kubelet reads it without importing the image-pull side, which
annotates with the kubelet's own types: no import circle between the two.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu.testing.images import ImageSet, containerd_start_error

#: ``startedAt`` of a container containerd could not start: its start time was never set (zero).
NEVER_STARTED = "1970-01-01T00:00:00Z"
#: containerd's exit code and reason for a container whose start failed (``errorStartExitCode``).
START_ERROR_EXIT_CODE, START_ERROR_REASON = 128, "StartError"


def started_argv(images: ImageSet, container: dict[str, Any]) -> tuple[list[str], str | None] | None:
    """What the runtime starts for ``container`` of a declared image, and containerd's refusal when the image
    lacks that first program (None: it starts). None for an image not declared: the kubelet runs
    ``command`` + ``args`` as they are."""
    reference = str(container.get("image") or "")
    if not images.declared(reference):
        return None
    image = images.get(reference)
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    argv = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not argv:
        return argv, None
    return argv, containerd_start_error(argv[0]) if image.lacks(argv[0]) else None

"""Whether the profiler may wrap a command that the image's ENTRYPOINT will receive as arguments.

On AWS Batch the command is Docker's CMD: the image's ENTRYPOINT stays and is run with the command
appended (``ENTRYPOINT + CMD``). The profiler's wrapper (``profiling.bundle``) is a command that
starts ``/bin/sh`` or ``python3``; it works only where the ENTRYPOINT runs its arguments as a
command: no ENTRYPOINT at all, or one known to end in ``exec "$@"``. An image whose ENTRYPOINT is
the program itself (``["python", "train.py"]``, ``["accelerate", "launch"]``) would receive the
wrapper as its arguments and fail, so it is not wrapped: the job runs as it would unprofiled, and
the note says why and how to profile it.

The ENTRYPOINTs known to run their arguments come from the images the docs recommend:

- ``/opt/nvidia/nvidia_entrypoint.sh``: NGC's framework images and ``nvidia/cuda``; it prints the
  banner, runs ``/opt/nvidia/entrypoint.d``, then ``exec "$@"``.
- ``docker-entrypoint.sh`` (any directory): the Docker Official Images' convention, a script that
  ends in ``exec "$@"``.
- ``tini`` and ``dumb-init`` (with or without ``--``): init processes that run their arguments.

A config that cannot be read (no network, a private registry the worker may not read) leaves the
ENTRYPOINT unknown, unless the image is one of the catalog's families whose published images all
set the same one (``PUBLISHED``); an unknown one runs unwrapped, as the rule is that profiling
never breaks a job that runs fine unprofiled. ``EXECS_ARGUMENTS`` (the operator's ``image_entrypoint``) declares an
image's ENTRYPOINT to run its arguments when neither the registry nor this list can tell.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

#: What a user passes as ``image_entrypoint`` for an ENTRYPOINT that runs its arguments as a command.
EXECS_ARGUMENTS = "execs-arguments"
#: ENTRYPOINT programs that run their arguments, with the arguments they may take first. A path
#: matches that path only; a bare name matches that file in any directory.
KNOWN: dict[str, tuple[tuple[str, ...], ...]] = {
    "/opt/nvidia/nvidia_entrypoint.sh": ((),),
    "docker-entrypoint.sh": ((),),
    "tini": ((), ("--",), ("-g", "--"), ("-s", "--")),
    "dumb-init": ((), ("--",)),
}
#: The ENTRYPOINT every published tag of a catalog family sets (repository of the normalized
#: reference -> ENTRYPOINT), for when the registry cannot be read: ``pytorch/pytorch`` sets none;
#: NGC's frameworks and ``nvidia/cuda`` set NVIDIA's entrypoint script.
PUBLISHED: dict[str, tuple[str, ...]] = {
    "docker.io/pytorch/pytorch": (),
    "nvcr.io/nvidia/pytorch": ("/opt/nvidia/nvidia_entrypoint.sh",),
    "docker.io/nvidia/cuda": ("/opt/nvidia/nvidia_entrypoint.sh",),
    # The image the Accelerate docs recommend: gpu-release-* inherits nvidia/cuda's ENTRYPOINT; the
    # cpu-release-* tags have none. Both pass their arguments on, so the decision is the same.
    "docker.io/huggingface/accelerate": ("/opt/nvidia/nvidia_entrypoint.sh",),
}
HOW_TO = (
    'to profile it, build the image without an ENTRYPOINT or with one that ends in exec "$@" '
    "(tini --, dumb-init --, /opt/nvidia/nvidia_entrypoint.sh), or pass "
    f"image_entrypoint={EXECS_ARGUMENTS!r} if it already runs its arguments as a command"
)


@dataclass(frozen=True)
class WrapDecision:
    """``wrap``: run the command under the profiler; ``note``: why not, for the log and the profile."""

    wrap: bool
    note: str | None = None


def passes_arguments_on(entrypoint: Sequence[str]) -> bool:
    """Whether an ENTRYPOINT runs its arguments as a command (an empty one: the arguments are the command)."""
    if not entrypoint:
        return True
    program, rest = entrypoint[0], tuple(entrypoint[1:])
    for known, forms in KNOWN.items():
        if program == known or (not known.startswith("/") and posixpath.basename(program) == known):
            return rest in forms
    return False


def published_entrypoint(image: str) -> tuple[str, ...] | None:
    """The ENTRYPOINT of a catalog family's image (``PUBLISHED``), None for any other image."""
    from airflow_gpu.images.registry import RegistryError, parse_reference

    try:
        reference = parse_reference(image)
    except RegistryError:
        return None
    return PUBLISHED.get(f"{reference.registry}/{reference.repository}")


def decide(image: str, entrypoint: Sequence[str] | None, unreadable: str | None = None) -> WrapDecision:
    """Wrap or not, for a command ``image`` receives after ``entrypoint`` (None with ``unreadable``:
    the config could not be read, and that is why)."""
    if entrypoint is None:
        entrypoint = published_entrypoint(image)
    if entrypoint is None:
        why = unreadable or "its config was not read"
        return WrapDecision(
            False,
            f"not profiled: the ENTRYPOINT of image {image} is unknown ({why}), and a command it receives as "
            f"arguments cannot be wrapped safely; pass image_entrypoint=[] (no ENTRYPOINT) or "
            f"image_entrypoint={EXECS_ARGUMENTS!r} to profile it",
        )
    if passes_arguments_on(entrypoint):
        return WrapDecision(True)
    return WrapDecision(
        False,
        f"not profiled: image {image} has ENTRYPOINT {list(entrypoint)}, which would receive the profiler as its "
        f"arguments; the command runs as given, unprofiled; {HOW_TO}",
    )


def check_entrypoint(value: Sequence[str] | str | None) -> tuple[str, ...] | str | None:
    """The operator's ``image_entrypoint``, refused at DAG parse time when it cannot be one."""
    from airflow_gpu.accelerators.errors import AcceleratorSpecError

    if value is None or value == EXECS_ARGUMENTS:
        return value
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise AcceleratorSpecError(
            "image_entrypoint", value, "not an ENTRYPOINT", ["a list of strings ([] for none)", repr(EXECS_ARGUMENTS)]
        )
    return tuple(value)

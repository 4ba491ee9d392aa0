"""The program a container could not start because its image does not have it, as each runtime words it.

A profiled workload's command starts with the profiler's wrapper (``/bin/sh``, or ``python3`` for an
image without a shell): an image without that program (distroless) cannot start the container at all.
That is not a preemption and not the workload's bug: the operator starts it again another way. This
module reads the runtime's refusal; it knows every shape, so the backends read it one way:

* runc (under containerd, Docker, ECS, or CRI-O): ``exec: "/bin/sh": stat /bin/sh: no such file or
  directory`` for a path, ``exec: "python3": executable file not found in $PATH`` for a name; since runc
  1.2 after "error during container init: ".
* crun (CRI-O's runtime on Fedora, RHEL and OpenShift): ``executable file `/bin/sh` not found in $PATH:
  No such file or directory``.

Where Kubernetes shows it depends on the runtime. containerd runs ``runc create`` in ``StartContainer``:
the container is ``terminated`` with reason ``StartError``, exit code 128 (``lastState`` once restarted,
the current state then ``waiting`` ``RunContainerError``). CRI-O runs it in ``CreateContainer``: the
container stays ``waiting`` with reason ``CreateContainerError`` and the kubelet tries again while the pod
stays ``Pending``. Docker through cri-dockerd says ``ContainerCannotRun`` (exit code 127). Pure: no
Airflow, no client; pods are API dicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The runtimes' words for a first program the image lacks; ``program`` is the one named.
RUNC_EXEC = r'exec: \\?"(?P<program>[^"\\]+)\\?": '
RUNC_CAUSES = r"(?:stat [^:]+: no such file or directory|executable file not found in \$PATH)"
EXEC_FAILURES = (
    re.compile(RUNC_EXEC + RUNC_CAUSES),
    re.compile(r"executable file `(?P<program>[^`]+)` not found"),
)
#: Container reasons under which a runtime reports that it could not start the container's process.
START_REASONS = frozenset({"StartError", "RunContainerError", "CreateContainerError", "ContainerCannotRun"})


def program_named(message: str) -> str | None:
    """The program a runtime's refusal says it could not execute; None for any other message."""
    for pattern in EXEC_FAILURES:
        if match := pattern.search(message):
            return match.group("program")
    return None


def missing_program(pod: Mapping[str, Any] | None, container: str) -> str | None:
    """The program ``container`` of ``pod`` (an API dict) could not start with because its image lacks it,
    from its current or last state; None when it started, or failed to for another reason."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != container:
            continue
        for where in ("state", "lastState"):
            for state in (status.get(where) or {}).values():
                if isinstance(state, Mapping) and state.get("reason") in START_REASONS:
                    program = program_named(str(state.get("message") or ""))
                    if program:
                        return program
    return None


def names_program(program: str, wanted: str) -> bool:
    """Whether the refused ``program`` is ``wanted`` (``/bin/sh`` and ``sh`` name the same shell)."""
    return program == wanted or program.rsplit("/", 1)[-1] == wanted.rsplit("/", 1)[-1]

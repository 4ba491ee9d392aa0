"""What ends a container: every process in it, as the runtime's PID namespace does.

The emulators start each container's main process in a session of its own. A process inside may
start its own process group (a profiler does, to signal the workload's whole group), so a
process group is not the container; the session is. Killing a container sends SIGKILL to every
process of that session.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def session_members(session: int) -> list[int]:
    """The processes whose session id is ``session`` (Linux ``/proc``)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def kill_container(main_pid: int) -> None:
    """SIGKILL every process of the container whose main process (a session leader) is ``main_pid``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(main_pid, signal.SIGKILL)
    for pid in session_members(main_pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)

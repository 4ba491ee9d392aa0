"""Whether the next try of a task would take its running work over (``retry_handover``, ``orphaned_try``).

A module of its own, with no import of the operators: the orphaned try's settling asks it from the pod
operator's mixins, which the operator module imports.
"""

from __future__ import annotations

from typing import Any


def why_no_takeover(op: Any, context: Any) -> str | None:
    """Why the next try would not take this try's running work over (None: it would)."""
    ti = context["ti"]
    max_tries, try_number = int(getattr(ti, "max_tries", 0) or 0), int(ti.try_number)
    if not op.reattach_on_restart:
        return "reattach_on_restart (durable) is off"
    if max_tries == 0 or try_number > max_tries:
        return "this try is the task's last"
    if getattr(op, "retry_policy", None) is not None:
        return "a retry_policy may refuse the retry"
    return None

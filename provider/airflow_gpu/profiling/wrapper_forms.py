"""The forms of the profiler's wrapper, and the next one for an image that cannot start the current one.

A profiled command starts with the wrapper's own program. The first form (``bundle.wrap``, or
``bundle.wrap_short`` on AWS Batch) starts ``/bin/sh``; an image without a shell (distroless) cannot start
it, so the second form (``bundle.wrap_python``, the profiler's code in the environment from
``bundle.environment()``) starts ``python3`` alone; an image without either runs the command unprofiled
(``NONE``). A job that runs fine unprofiled is never broken by profiling: the operators move to the next
form when the runtime says the image lacks the current form's program (``spot.start_failure``).

A form is recorded per image (``SpotRun.profiler_forms``: image -> ``PYTHON`` or ``NONE``; an image not
there starts with ``SHELL``), so that it rides with the run's state through deferrals and pod
annotations, and the operators keep it for the task's later tries. ``rewrap`` turns a pod's container (an
API dict) from one form into another, which is how the triggerer makes the next pod from the one it
carries without carrying each form. Runs on the worker and the triggerer: not shipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_gpu.profiling import bundle

SHELL, PYTHON = bundle.SHELL, bundle.PYTHON
#: The recorded form of an image that has neither program: its command runs unprofiled.
NONE = "none"
#: The forms in the order they are tried.
ORDER = (SHELL, PYTHON)


def next_form(form: str) -> str:
    """The form after ``form``: ``PYTHON`` after ``SHELL``, then ``NONE``."""
    return ORDER[ORDER.index(form) + 1] if form in ORDER[:-1] else NONE


def form_of(command: Sequence[str] | None) -> str | None:
    """Which wrapper ``command`` is (``SHELL`` or ``PYTHON``); None for a command not wrapped."""
    command = list(command or [])
    if len(command) >= 4 and command[0] == SHELL and command[1] == "-c" and command[3] == bundle.ARGV0:
        return SHELL
    if command[:3] == [PYTHON, "-c", bundle.LOADER_FROM_ENV]:
        return PYTHON
    return None


def user_command(command: Sequence[str]) -> list[str]:
    """The user's command inside a wrapped ``command`` (``command`` itself when it is not wrapped)."""
    form = form_of(command)
    return list(command[4:] if form == SHELL else command[3:] if form == PYTHON else command)


def recorded(forms: Mapping[str, str], image: str) -> str:
    """The form an image's pods start with: the recorded one, else ``SHELL``."""
    return forms.get(image) or SHELL


def note(image: str, form: str) -> str | None:
    """What a task's log and its ``gpu_profile`` XCom say of an image that needs ``form`` (None: ``SHELL``)."""
    if form == PYTHON:
        return f"image {image} has no /bin/sh: the profiler is started by python3 alone"
    if form == NONE:
        return f"not profiled: image {image} has neither /bin/sh nor python3, which the profiler needs"
    return None


def rewrap(container: dict[str, Any], form: str) -> None:
    """``container`` (an API dict) turned into ``form`` (``PYTHON`` or ``NONE``) from the wrapped form it
    has; one not wrapped, or asked for ``SHELL`` (no form goes back to it), is left as it is."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    have = form_of(command)
    if have is None or have == form or form == SHELL:
        return
    user = user_command(command)
    extra = bundle.environment() if form == PYTHON else {}
    env = [e for e in container.get("env") or [] if e.get("name") not in (bundle.ENV_BUNDLE, bundle.ENV_BOOTSTRAP)]
    container["env"] = [*env, *({"name": k, "value": v} for k, v in extra.items())]
    container["command"] = bundle.wrap_python(user) if form == PYTHON else user
    container.pop("args", None)

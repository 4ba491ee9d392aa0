"""The workload's end in the pod's status: the result line and the exit, as a container termination message.

A pod's log lives on its node. When the node goes right after the pod succeeded (a spot reclaim, a
scale-down: PodGC then deletes the pod), the log goes with it, and with the log the result line the
workload printed: the task succeeded without its result (the soak, seed 463621002: 24 tasks). The
kubelet copies the file at the container's ``terminationMessagePath`` (``/dev/termination-log`` by
default) into ``status.containerStatuses[].state.terminated.message`` when the container ends, in the
API server, where the watch that sees the pod succeed sees it too.

So the profiler's entrypoint passes the command's standard output on as it comes (``ResultCatcher``
keeps the last result line on the way) and, when the command exits 0, writes the result line and an
end line (``{"exit_code", "signals", "spot_notice"}``: an exit 0 on a deletion's SIGTERM is no finished
workload) to that file, after anything the workload wrote there itself. A failure writes nothing, so
``terminationMessagePolicy: FallbackToLogsOnError`` still gives the log's end. The kubelet keeps 4096
bytes: a result line that does not fit leaves only the end line.

Shipped into the container: standard library only, Python 3.8.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The line a workload prints to return a value (``utils.results`` reads it from the log).
RESULT_MARKER = "::airflow-gpu-result::"
#: The entrypoint's last line in the termination message: how the command ended.
END_MARKER = "::airflow-gpu-end::"
#: The environment variable that names the file: the container's ``terminationMessagePath``, set by the
#: operator; without it (AWS Batch, a run outside Kubernetes) nothing is written and nothing is piped.
ENV_TERMINATION_LOG = "AIRFLOW_GPU_TERMINATION_LOG"
#: What the kubelet keeps of the file (``kubecontainer.MaxContainerTerminationMessageLength``).
MAX_MESSAGE_BYTES = 4096
#: The variable with the bytes the kubelet keeps whole (``write``'s ``budget``), set by the operator.
ENV_TERMINATION_BYTES = "AIRFLOW_GPU_TERMINATION_BYTES"
#: What the kubelet keeps of all of a pod's messages together (``normalizeStatus``), shared per container.
MAX_POD_MESSAGE_BYTES = 12 * 1024


class ResultCatcher:
    """The last complete result line in a byte stream fed in pieces, however its lines are cut."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self.line: str | None = None
        self.too_long = False  # the last result line was past ``limit``
        self._pending = b""  # the current line so far, while it is within ``limit``
        self._head: bytes | None = None  # the start of a current line past ``limit``, whose rest is dropped

    def feed(self, data: bytes) -> None:
        *complete, rest = (self._pending + data).split(b"\n")
        for line in complete:
            self._take(line, self._head)
            self._head = None
        if self._head is not None:  # still within a line past ``limit``: its rest is not kept
            rest = b""
        elif len(rest) > self.limit:
            self._head, rest = rest[: len(RESULT_MARKER)], b""
        self._pending = rest

    def close(self) -> None:
        """The stream ended: a last line without its newline counts too."""
        if self._pending or self._head is not None:
            self._take(self._pending, self._head)
        self._pending, self._head = b"", None

    def _take(self, line: bytes, head: bytes | None) -> None:
        text = (line if head is None else head).decode("utf-8", "replace").rstrip("\r")
        if text.startswith(RESULT_MARKER):  # the last result line counts, even one too long to carry
            self.too_long = head is not None or len(line) > self.limit
            self.line = None if self.too_long else text


def message(
    result_line: str | None, result: str, code: int, signals: Sequence[str], spot_notice: str | None, room: int
) -> str:
    """The lines to write, newlines included, within ``room`` bytes: the result line when it fits, then the end
    line, whose ``result`` says what became of the result: ``kept`` (the line before it), ``too long``,
    ``none`` printed, or ``unknown`` (the output could not be read to its end)."""

    def end(said: str) -> str:
        fields = {"exit_code": code, "signals": list(signals), "spot_notice": spot_notice, "result": said}
        return END_MARKER + json.dumps(fields) + "\n"

    if result_line is not None and result == "kept":
        text = result_line + "\n" + end("kept")
        if len(text.encode()) <= room:
            return text
        result = "too long"
    text = end(result)
    return text if len(text.encode()) <= room else ""


def budget(value: str | None) -> int:
    """``ENV_TERMINATION_BYTES`` as a number of bytes; the kubelet's per-container most when unset or bad."""
    try:
        given = int(value or MAX_MESSAGE_BYTES)
    except ValueError:
        return MAX_MESSAGE_BYTES
    return max(0, min(given, MAX_MESSAGE_BYTES))


def write(
    path: str | None,
    result_line: str | None,
    result: str,
    code: int,
    signals: Sequence[str],
    spot_notice: str | None,
    budget: int = MAX_MESSAGE_BYTES,
) -> str | None:
    """Append the end to the termination message file, which the kubelet made; why not, or None.

    ``budget``: what the kubelet keeps of it whole. It reads the file's last 4096 bytes, then cuts each
    container's message to its share of 12 KiB for the pod (``normalizeStatus``), from the front: the
    whole file must fit both, so the operator passes the smaller. Only an existing file is written (the
    kubelet mounts it): on a host without one nothing is made."""
    if not path:
        return None
    file = Path(path)
    try:
        if not file.is_file():
            return f"no termination message file at {path}"
        size = file.stat().st_size
        room = min(budget, MAX_MESSAGE_BYTES) - size - (1 if size else 0)
        text = message(result_line, result, code, signals, spot_notice, room)
        if not text:
            return f"the workload's own termination message leaves no room in {path}"
        with file.open("a", encoding="utf-8") as out:
            out.write(("\n" if size else "") + text)
    except OSError as error:
        return f"the termination message could not be written: {error}"
    return None


def read(message_text: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """``(result line, end)`` from a container's termination message; None for what it does not hold.

    Only the entrypoint's own lines count: the last end line, and the result line right before it
    (a workload's own message comes first, and a marker it wrote there is not the entrypoint's)."""
    lines = [line for line in (message_text or "").splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(END_MARKER):
        return None, None
    try:
        end = json.loads(lines[-1][len(END_MARKER) :])
    except ValueError:
        return None, None
    if not isinstance(end, dict):
        return None, None
    result = lines[-2] if len(lines) > 1 and lines[-2].startswith(RESULT_MARKER) else None
    return result, end

"""One pod container's log, streamed into the task log while the pod runs, nothing lost or repeated.

A training over several machines prints each rank's output into the task log as it comes. A log
stream can end before the container does: the API server or the kubelet closes long streams, a
connection resets, the container is still starting (``400 ... is waiting to start``). KPO's
``PodManager.fetch_container_logs`` resumes such a stream with ``sinceSeconds`` and may repeat the
lines of the last second; this follower asks for ``timestamps=true`` and skips every line not
newer than the last one it wrote, so a resumed stream repeats nothing. Its owner calls
:meth:`PodLogFollower.finish` once the pod is done, which waits for the stream to reach the end
of the log: without it a process exiting right after the Job completes drops the lines still in
flight.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

#: Seconds between attempts while the stream cannot be read or ended before the container did.
RETRY_SECONDS = 1.0
#: Seconds more than the last line's age a resumed stream asks for: the node's clock may differ.
SKEW_MARGIN_SECONDS = 10
#: Read timeout of one stream: a quiet stream is reopened, so a half-open connection cannot hang.
READ_TIMEOUT_SECONDS = 300.0
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")


def parse_stamp(stamp: str) -> tuple[datetime, int] | None:
    """An RFC 3339 (nano) timestamp as (whole seconds, nanoseconds), ordered as the kubelet wrote them.

    Go's ``RFC3339Nano`` drops trailing zeros (``.5Z``, ``.123456789Z``), so the strings do not
    sort as text; Python's ``datetime`` keeps microseconds only, so the fraction is kept apart.
    """
    match = _STAMP.fullmatch(stamp)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    try:
        seconds = datetime.fromisoformat(whole + ("+00:00" if zone in ("Z", "z") else zone))
    except ValueError:
        return None
    return seconds.astimezone(timezone.utc), int((fraction or "").ljust(9, "0"))


class PodLogFollower:
    """Streams one container's log to ``emit``, resuming after interruptions, until the container ends."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        pod: str,
        container: str,
        emit: Callable[[str], None],
        *,
        warn: Callable[[str], None] | None = None,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.client, self.namespace, self.pod, self.container = client, namespace, pod, container
        self._emit, self._warn, self._retry_seconds = emit, warn, retry_seconds
        self._last: tuple[datetime, int] | None = None  # the newest line written
        self._at_last = 0  # lines written with exactly that stamp (a burst can share one)
        self._resumed_after: tuple[datetime, int] | None = None  # what the current stream may repeat
        self._to_skip = 0  # lines at that very stamp already written, to skip again
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name=f"log-{pod}", daemon=True)

    def start(self) -> PodLogFollower:
        self._thread.start()
        return self

    def finish(self, timeout: float) -> bool:
        """Wait until the log is read to its end (the container has ended); False if it was not in time."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            return False
        return True

    def stop(self) -> None:
        """Stop following now (the task is killed): lines not yet read stay in the pod's log."""
        self._stop.set()

    # --- the stream -----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            reached_end = self._stream()
            state = self._container_state()
            if state == "gone":
                return
            if state == "terminated":
                if not reached_end:
                    self._stream(follow=False)  # what the interrupted stream had not sent yet
                return
            self._stop.wait(self._retry_seconds)

    def _stream(self, follow: bool = True) -> bool:
        """One read of the log; True if it ran to the end of the stream."""
        kwargs: dict[str, Any] = {}
        self._resumed_after, self._to_skip = self._last, self._at_last
        if self._last is not None:  # the lines since the last one written, with a margin for clock skew
            age = datetime.now(timezone.utc) - self._last[0]
            kwargs["since_seconds"] = max(1, math.ceil(age.total_seconds()) + SKEW_MARGIN_SECONDS)
        try:
            response = self.client.read_namespaced_pod_log(
                self.pod,
                self.namespace,
                container=self.container,
                follow=follow,
                timestamps=True,
                _preload_content=False,
                _request_timeout=(30, READ_TIMEOUT_SECONDS),
                **kwargs,
            )
            pending = b""
            for chunk in response.stream():  # chunks, not lines: a line may span two
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    self._line(raw.decode("utf-8", "replace"))
                if self._stop.is_set():
                    response.release_conn()
                    return False
            if pending:
                self._line(pending.decode("utf-8", "replace"))
            return True
        except Exception as error:  # the outcome comes from the pod, not from its log
            self._note(f"{type(error).__name__}: {getattr(error, 'reason', None) or error}")
            return False

    def _line(self, line: str) -> None:
        stamp_text, _, text = line.partition(" ")
        stamp = parse_stamp(stamp_text)
        if stamp is None:  # no timestamp: a continuation, or a server that ignores ``timestamps``
            text = line
        elif self._resumed_after is not None and stamp < self._resumed_after:
            return  # written from the stream before this one
        elif self._resumed_after is not None and stamp == self._resumed_after and self._to_skip > 0:
            self._to_skip -= 1
            return
        else:
            self._at_last = self._at_last + 1 if stamp == self._last else 1
            self._last = stamp
        self._emit(text)

    def _container_state(self) -> str:
        """``gone`` (no pod), ``terminated`` or ``running`` (or not started yet, or unknown)."""
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.client.read_namespaced_pod(self.pod, self.namespace)
        except ApiException as error:
            if error.status == 404:
                return "gone"
            return "running"
        except Exception:
            return "running"
        for status in (pod.status.container_statuses or []) if pod.status else []:
            if status.name == self.container and status.state is not None and status.state.terminated is not None:
                return "terminated"
        if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
            return "terminated"
        return "running"

    def _note(self, reason: str) -> None:
        if self._warn is not None and not self._warned and not self._stop.is_set():
            self._warned = True
            self._warn(f"the log of {self.pod} stopped ({reason}); reading it again")

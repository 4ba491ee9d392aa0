"""The container's entrypoint for a profiled GPU task: the user's command as a child, sampled.

``python3 -c <bootstrap> <payload> COMMAND...`` (see ``bundle.wrap``) lands in ``main``: it starts
COMMAND with the same standard streams and environment, samples the GPUs while it runs (NVML, else
``nvidia-smi``, per ``AIRFLOW_GPU_PROFILER``), forwards the signals it gets to the child (SIGTERM
on a spot reclaim or a pod deletion must still reach the workload, which may checkpoint on it),
watches the EC2 instance metadata for a spot interruption notice, and at the child's exit prints
the profile as marker lines (``marker``) and exits with the child's exit code (128+N for a signal
N, as a shell reports it).

Profiling never fails the task: whatever goes wrong in it becomes the payload's ``note``.
Shipped into the container: standard library and ``airflow_gpu.profiling`` only, Python 3.8.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from airflow_gpu.profiling import marker
from airflow_gpu.profiling.nvidia_smi import NvidiaSmiSampler
from airflow_gpu.profiling.nvml import NvmlSampler
from airflow_gpu.profiling.samples import Sample
from airflow_gpu.profiling.summary import GpuSummary

PROG = "airflow-gpu-profile"
#: Signals passed on to the child: the ones a container runtime, a shell or an operator sends.
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
#: How long a signalled command's other processes may take to end before the profile is printed.
GROUP_GRACE_SECONDS = 10.0
#: How long the samplers may still take to start once the command has ended (NVML can hang).
START_BUDGET_SECONDS = 10.0
#: From the command's end to the profile printed: past this, exit with its code, without a profile.
EXIT_BUDGET_SECONDS = 30.0
#: ``termination.ENV_TERMINATION_LOG``, set on Kubernetes only: ``termination`` is not shipped to AWS Batch.
ENV_TERMINATION_LOG = "AIRFLOW_GPU_TERMINATION_LOG"
#: How long the command's standard output may take to drain once it has ended (a process it left
#: behind may hold the pipe open: it is not waited for).
DRAIN_SECONDS = 2.0
#: How often the main thread looks in while the command runs and while the samplers start or stop,
#: to run the handlers of signals that another thread took (``wait_for_child``, ``join``): the
#: longest a forwarded SIGTERM can be late.
SIGNAL_CHECK_SECONDS = 0.05
IMDS_ENDPOINT = "http://169.254.169.254"  # botocore's default for AWS_EC2_METADATA_SERVICE_ENDPOINT
IMDS_POLL_SECONDS = 5.0  # AWS gives two minutes' notice; polling every 5 s is what it recommends
IMDS_TIMEOUT_SECONDS = 1.0
IMDS_TOKEN_TTL = 21600
OFF = ("off", "0", "false", "no")


class Sampler(Protocol):
    """What ``NvmlSampler`` and ``NvidiaSmiSampler`` both are."""

    source: str
    note: str | None

    def start(self) -> bool: ...

    def stop(self) -> None: ...

    def summaries(self) -> list[GpuSummary]: ...

    @property
    def taken(self) -> int: ...

    def samples(self) -> list[Sample]: ...

    def devices(self) -> dict[str, Any]: ...


def log(message: str) -> None:
    """One line on standard error, where the task's log shows it."""
    try:
        sys.stderr.write(f"airflow-gpu: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def choose_sampler(env: Mapping[str, str], interval: float) -> tuple[Sampler | None, list[str]]:
    """The started sampler ``AIRFLOW_GPU_PROFILER`` asks for (auto: NVML, else nvidia-smi), and notes.

    The sampler reads the GPUs that ``env`` gives the task (``NVIDIA_VISIBLE_DEVICES``,
    ``CUDA_VISIBLE_DEVICES``), not every GPU the driver shows.

    The notes say why none started; a fallback that worked needs no excuse for the one before it,
    unless that one is misconfigured (a ``pynvml`` that is not nvidia-ml-py's): the user can fix that.
    """
    choice = (env.get("AIRFLOW_GPU_PROFILER") or "auto").strip().lower()
    notes: list[str] = []
    kinds: dict[str, list[Callable[..., Sampler]]] = {
        "nvml": [NvmlSampler], "nvidia-smi": [NvidiaSmiSampler], "auto": [NvmlSampler, NvidiaSmiSampler],
    }  # fmt: skip
    if choice not in kinds:
        notes.append(f"unknown AIRFLOW_GPU_PROFILER={choice!r}, used auto")
        choice = "auto"
    reasons: list[str] = []
    for kind in kinds[choice]:
        sampler = kind(interval, env=env)
        try:
            if sampler.start():
                return sampler, notes
        except Exception as error:  # a sampler's own bug must not end the task
            sampler.note = f"{sampler.source}: {type(error).__name__}: {error}"
        reasons.append(sampler.note or f"{sampler.source}: unavailable")
        if getattr(sampler, "misconfigured", False):
            notes.append(reasons[-1])
    return None, [*notes, "no GPU profile: " + "; ".join(reasons)]


def interval_from(env: Mapping[str, str], default: float | None, notes: list[str]) -> float:
    """``AIRFLOW_GPU_PROFILE_INTERVAL`` if it is a positive number of seconds, else ``default`` (1 s)."""
    fallback = default if default is not None and default > 0 else 1.0
    raw = env.get("AIRFLOW_GPU_PROFILE_INTERVAL")
    if not raw:
        return fallback
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        notes.append(f"AIRFLOW_GPU_PROFILE_INTERVAL={raw!r} is not a positive number of seconds; used {fallback}")
        return fallback
    return value


class SpotWatcher:
    """Polls IMDSv2's ``spot/instance-action`` in a thread; on a notice, writes the notice file once.

    No token on the first try (not on EC2, or a container the metadata hop limit keeps out):
    polling stops at once with ``note`` saying so, rather than costing a timeout every 5 s.
    """

    def __init__(self, endpoint: str, notice_file: str | None, *, interval: float = IMDS_POLL_SECONDS) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.notice_file = notice_file
        self.interval = interval
        self.notice: str | None = None
        self.note: str | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via HTTP_PROXY
        self._stopping = threading.Event()
        self._first_try = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="airflow-gpu-spot-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; a first token request still in flight gets its timeout to answer."""
        self._stopping.set()
        self._first_try.wait(IMDS_TIMEOUT_SECONDS + 0.5)
        with self._lock:
            self._closed = True  # nothing is written or logged after the marker

    def _token(self) -> str:
        request = urllib.request.Request(
            self.endpoint + "/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(IMDS_TOKEN_TTL)},
        )
        with self._opener.open(request, timeout=IMDS_TIMEOUT_SECONDS) as response:
            return str(response.read().decode("ascii").strip())

    def _instance_action(self, token: str) -> str | None:
        """The notice's ``time``, or None while there is none (404)."""
        request = urllib.request.Request(
            self.endpoint + "/latest/meta-data/spot/instance-action", headers={"X-aws-ec2-metadata-token": token}
        )
        try:
            with self._opener.open(request, timeout=IMDS_TIMEOUT_SECONDS) as response:
                body = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise
        try:
            when = json.loads(body).get("time")
        except (ValueError, AttributeError):
            when = None
        return str(when) if when else datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _run(self) -> None:
        try:
            token, since = self._token(), time.monotonic()
        except Exception as error:
            reason = getattr(error, "reason", None) or error
            self.note = f"spot notices not watched: no IMDSv2 token from {self.endpoint} ({reason})"
            return
        finally:
            self._first_try.set()
        while not self._stopping.is_set():
            try:
                if time.monotonic() - since > IMDS_TOKEN_TTL / 2:
                    token, since = self._token(), time.monotonic()
                when = self._instance_action(token)
            except urllib.error.HTTPError as error:
                if error.code == 401:  # the token expired: the next round gets a new one
                    since = float("-inf")
                when = None
            except Exception:  # a slow or failed poll: the next one may answer
                when = None
            if when is not None:
                self._record(when)
                return
            self._stopping.wait(self.interval)

    def _record(self, when: str) -> None:
        with self._lock:
            if self._closed or self.notice is not None:
                return
            self.notice = when
            log(f"spot interruption notice: the instance is reclaimed at {when}")
            if not self.notice_file:
                return
            try:
                path = Path(self.notice_file)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(when + "\n")
            except OSError as error:
                self.note = f"spot notice seen, but {self.notice_file} could not be written ({error})"


class Forwarder:
    """Passes the signals the entrypoint gets to the child; one that comes before the child is held."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._child: subprocess.Popen[bytes] | None = None
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for name in FORWARDED:
            number = getattr(signal, name, None)
            if number is not None:
                self._previous[number] = signal.signal(number, self._handle)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self._child = child
        pending, self._pending = self._pending, []
        for number in pending:
            self._send(number)

    def _handle(self, number: int, frame: Any) -> None:
        """``seen`` lists the signals that reached the workload (or will, once it starts): one that comes after
        every process of the command has ended (a drain's SIGTERM while the profiler drains the log of a
        finished workload) did not stop it, and its end must not say so (the sixth soak took such finished
        pods for stopped ones, ``spot.classifier.ended_on_a_deletion_signal``)."""
        if self._child is None:
            self.seen.append(signal.Signals(number).name)
            self._pending.append(number)
        elif self._send(number):
            self.seen.append(signal.Signals(number).name)

    def _send(self, number: int) -> bool:
        """To the child's whole process group, as ``tini -g`` does: a shell that runs the workload
        (``bash -c "pip install x && python train.py"``) does not pass SIGTERM on, and without the
        profiler the runtime's SIGTERM would never have killed it before the workload could stop. Whether
        a process of the command got it."""
        assert self._child is not None
        try:
            os.killpg(self._child.pid, number)
            return True
        except OSError:  # the group is gone, or not ours: the child itself
            if self._child.poll() is not None:  # reaped: nothing of the command is left to get it
                return False
            with contextlib.suppress(OSError):  # it has just exited
                self._child.send_signal(number)
                return True
            return False


class Tee:
    """The command's standard output passed on to ours as it comes, its last result line caught on the way
    (``termination``): the line goes into the termination message, which outlives the pod's log."""

    def __init__(self, source: int) -> None:
        from airflow_gpu.profiling import termination

        self.catcher: Any = termination.ResultCatcher()
        self._source = source
        self.caught = True  # False once the catcher failed: the output is still passed on, unread
        self.thread = threading.Thread(target=self._run, name="airflow-gpu-profiler-tee", daemon=True)

    def result(self) -> tuple[str | None, str]:
        """The last result line and what became of it (``termination.message``'s ``result``)."""
        if self.thread.is_alive() or not self.caught:  # still reading (a process holds the pipe), or broken
            return None, "unknown"
        if self.catcher.line is not None:
            return self.catcher.line, "kept"
        return None, "too long" if self.catcher.too_long else "none"

    def _run(self) -> None:
        out = sys.stdout.fileno() if sys.stdout is not None else None
        while True:  # never stops reading before the end: a child whose pipe is full would hang the pod
            try:
                data = os.read(self._source, 65536)
            except OSError:
                break
            if not data:
                break
            if self.caught:
                try:
                    self.catcher.feed(data)
                except Exception:  # passed on unread from here
                    self.caught = False
            while data and out is not None:
                try:
                    data = data[os.write(out, data) :]
                except InterruptedError:
                    continue
                except OSError:  # a closed standard output: the lines are still caught
                    out = None
        if self.caught:
            try:
                self.catcher.close()
            except Exception:
                self.caught = False


def wait_for_child(child: subprocess.Popen[bytes]) -> int:
    """The command's return code, once it has ended; the signals the entrypoint gets meanwhile are
    passed on within ``SIGNAL_CHECK_SECONDS``.

    Not ``child.wait()``: the kernel delivers a process-directed signal (the runtime's SIGTERM) to
    any one thread that does not block it, the samplers' threads included, and Python runs its
    handler only in the main thread, the next time that thread runs Python code. A main thread
    blocked in ``waitpid`` would not run it before the command ends, and the command (waiting for
    that very SIGTERM to checkpoint) would not end before SIGKILL. A signal the main thread takes
    itself interrupts the sleep here and is passed on at once.
    """
    while True:
        code = child.poll()
        if code is not None:
            return code
        time.sleep(SIGNAL_CHECK_SECONDS)


def join(thread: threading.Thread, timeout: float | None = None) -> None:
    """``thread.join(timeout)`` in steps of ``SIGNAL_CHECK_SECONDS``, for the reason ``wait_for_child``
    polls: a SIGTERM that a sampler thread took while the main thread waits here (the workload has
    ended, its shell at least, and the samplers are starting or stopping) still reaches what is left
    of the workload within the step, not once a hung start or stop has timed out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while thread.is_alive():
        step = SIGNAL_CHECK_SECONDS if deadline is None else min(SIGNAL_CHECK_SECONDS, deadline - time.monotonic())
        if step <= 0:
            return
        thread.join(step)


def wait_for_group(group: int, timeout: float) -> bool:
    """Until no process of the command's group is left (True), or ``timeout`` (False).

    A signalled shell may exit before the workload it started has saved its checkpoint; the
    profile is printed once that workload is done, so that it stays the last thing in the log.
    Orphans that were reparented to this process (it is PID 1 in a container) are reaped here:
    a zombie would keep the group alive. Called once the samplers have stopped: by then this
    process has no child of its own left to wait for.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        try:
            os.killpg(group, 0)
        except OSError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128+N for one killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def payload(
    sampler: Sampler | None,
    *,
    notes: Sequence[str],
    interval: float,
    started: float,
    ended: float,
    code: int,
    signals: Sequence[str],
    spot_notice: str | None,
) -> tuple[dict[str, Any], list[Sample]]:
    """The payload (without its series, which ``marker.fit`` adds) and every sample taken."""
    samples = sampler.samples() if sampler is not None else []
    info = sampler.devices() if sampler is not None else {}
    return {
        "v": marker.VERSION,
        "source": sampler.source if sampler is not None else "none",
        "note": "; ".join(notes) or None,
        "interval": interval,
        "started": started,
        "ended": ended,
        "exit_code": code,
        "signals": list(signals),
        "spot_notice": spot_notice,
        "driver": info.get("driver"),
        "cuda": info.get("cuda"),
        "gpus": info.get("gpus") or [],
        "topology": info.get("topology"),
        "summary": [s.to_json() for s in sampler.summaries()] if sampler is not None else [],
        "samples_taken": sampler.taken if sampler is not None else 0,
    }, samples


def print_marker(lines: Sequence[str]) -> None:
    """The marker lines, last on standard output; a blank line first ends a line the child left open."""
    try:
        sys.stdout.flush()
        sys.stdout.write("\n" + "\n".join(lines) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed standard output: there is no log to put it in
        pass


def _start_profiling(
    env: Mapping[str, str], interval: float, notes: list[str], late: threading.Event
) -> tuple[Sampler | None, SpotWatcher | None]:
    """The sampler and the spot watcher; their notes go to ``notes``, and the one line a user should
    read now to the log, unless the command has already ended without them (``late``)."""
    sampler: Sampler | None = None
    try:
        sampler, said = choose_sampler(env, interval)
        notes.extend(said)
        if said and not late.is_set():
            log(said[-1])  # why there is no profile, or what to fix in the image
    except Exception as error:
        notes.append(f"no GPU profile: {type(error).__name__}: {error}")
    watcher = None
    if (env.get("AIRFLOW_GPU_IMDS") or "").strip().lower() not in OFF:
        try:
            endpoint = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or IMDS_ENDPOINT
            watcher = SpotWatcher(endpoint, env.get("AIRFLOW_GPU_SPOT_NOTICE_FILE") or None)
            watcher.start()
        except Exception as error:
            notes.append(f"spot notices not watched: {type(error).__name__}: {error}")
            watcher = None
    return sampler, watcher


def _stop_profiling(sampler: Sampler | None, watcher: SpotWatcher | None, notes: list[str]) -> None:
    for part in (sampler, watcher):
        if part is None:
            continue
        try:
            part.stop()
        except Exception as error:
            notes.append(f"stopping {type(part).__name__}: {type(error).__name__}: {error}")
        if part.note:
            notes.append(part.note)


def finish(sampler: Sampler | None, notes: list[str], **run: Any) -> None:
    """Print the marker for the run; a profile that cannot be built is a note in an empty one, and
    one that cannot even be that is a log line. Never raises: the child's exit code must get out."""
    try:
        built, samples = payload(sampler, notes=notes, **run)
        print_marker(marker.render(built, samples))
        return
    except Exception as error:
        notes.append(f"the profile could not be built: {type(error).__name__}: {error}")
    try:
        built, samples = payload(None, notes=notes, **{**run, "spot_notice": None})
        print_marker(marker.render(built, samples))
    except Exception as error:
        log(f"no GPU profile: {type(error).__name__}: {error}")


def main(argv: Sequence[str] | None = None, *, interval: float | None = None) -> int:
    """Run ``argv`` profiled; its exit code. ``interval``: seconds between samples unless the
    environment says otherwise (``AIRFLOW_GPU_PROFILE_INTERVAL``)."""
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        log(f"usage: {PROG} COMMAND [ARGUMENT...]")
        return 2
    env = os.environ
    notes: list[str] = []
    seconds = interval_from(env, interval, notes)
    forwarder = Forwarder()
    try:
        forwarder.install()
    except ValueError:  # not the main thread: the child still runs, unforwarded
        notes.append("signals are not forwarded (the entrypoint does not run in the main thread)")
    try:
        started = time.time()
        try:
            # Its own process group (same session, so it is still the container's), for the signals;
            # not on a terminal, where a background group that reads stdin would be stopped.
            interactive = sys.stdin is not None and sys.stdin.isatty()
            end_file = env.get(ENV_TERMINATION_LOG) or None
            on_terminal = sys.stdout is not None and sys.stdout.isatty()  # ``tty: true``: left a terminal
            piped = end_file is not None and Path(end_file).is_file() and not on_terminal  # else untouched
            child = subprocess.Popen(
                command, preexec_fn=None if interactive else os.setpgrp, stdout=subprocess.PIPE if piped else None
            )  # no thread yet
        except OSError as error:
            code = 127 if isinstance(error, FileNotFoundError) else 126
            log(f"{command[0]}: {error.strerror or error}")
            notes.append(f"the command did not start: {error.strerror or error}")
            finish(
                None, notes, interval=seconds, started=started, ended=time.time(), code=code,
                signals=forwarder.seen, spot_notice=None,
            )  # fmt: skip
            return code
        forwarder.attach(child)
        tee = None
        if child.stdout is not None:
            tee = Tee(child.stdout.fileno())
            tee.thread.start()
        # Started beside the child: NVML or nvidia-smi can hang on a GPU that fell off the bus, and
        # the command's end must still end the container.
        started_parts: list[tuple[Sampler | None, SpotWatcher | None]] = []
        start_notes: list[str] = []
        late, handover = threading.Event(), threading.Lock()

        def start() -> None:
            parts = _start_profiling(env, seconds, start_notes, late)
            with handover:
                if not late.is_set():
                    started_parts.append(parts)
                    return
            _stop_profiling(*parts, [])  # up after the command ended and the budget was spent: unread

        starter = threading.Thread(target=start, name="airflow-gpu-profiler-start", daemon=True)
        starter.start()
        code = exit_code(wait_for_child(child))
        ended = time.time()
        if tee is not None:  # its output before the profile: the report stays last in the log
            join(tee.thread, DRAIN_SECONDS)
        join(starter, START_BUDGET_SECONDS)
        with handover:
            if not started_parts:
                late.set()
        sampler, watcher = started_parts[0] if started_parts else (None, None)
        if started_parts:
            notes.extend(start_notes)
        else:
            notes.append(f"the GPU samplers did not start within {START_BUDGET_SECONDS:g} s (a hung driver?)")
        # Whatever hangs from here on (a sampler that will not stop), the command's exit code is kept.
        watchdog = threading.Timer(EXIT_BUDGET_SECONDS, os._exit, args=(code,))
        watchdog.daemon = True
        watchdog.start()
        # In a thread of its own, for the signals (``join``): stopping a sampler joins its thread.
        stopper = threading.Thread(
            target=_stop_profiling, args=(sampler, watcher, notes), name="airflow-gpu-profiler-stop", daemon=True
        )
        stopper.start()
        join(stopper)
        if forwarder.seen and not wait_for_group(child.pid, GROUP_GRACE_SECONDS):
            notes.append(f"processes of the command still ran {GROUP_GRACE_SECONDS:g} s after it was signalled")
        notice = watcher.notice if watcher is not None else None
        if tee is not None and code == 0:  # a failure's message stays the kubelet's (FallbackToLogsOnError)
            from airflow_gpu.profiling import termination

            line, said = tee.result()
            budget = termination.budget(env.get(termination.ENV_TERMINATION_BYTES))
            unwritten = termination.write(end_file, line, said, code, forwarder.seen, notice, budget)
            if unwritten:
                notes.append(unwritten)
        finish(
            sampler, notes, interval=seconds, started=started, ended=ended, code=code, signals=forwarder.seen,
            spot_notice=notice,
        )  # fmt: skip
        watchdog.cancel()
        return code
    finally:
        forwarder.restore()


if __name__ == "__main__":
    sys.exit(main())

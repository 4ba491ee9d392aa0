"""The kubelet: each container of a bound pod runs as a local process.

Images are not pulled; the container's ``command`` + ``args`` (or ``args`` alone when there is no
command, since there is no image entrypoint to prepend) must exist on this machine. An image declared
to the cluster (``container_start.started_argv``) brings its ENTRYPOINT and Cmd, its PATH without the programs
it lacks, and containerd's ``StartError`` for a first program it does not have. Output goes to
the pod log, exit codes to the container statuses, and deletion sends SIGTERM to the container's
main process, then SIGKILL to all its processes when the grace period is over, as the real
kubelet does.

Where the machine allows it (root; ``volumes.namespaces_available``), each container runs in its
own mount and PID namespaces under ``container_init.py`` (PID 1, passing signals on), with its
pod's volumes (``volumes.py``) bind-mounted at their mount paths; ``pod_exec.py`` and preStop
hooks enter those namespaces. Elsewhere a container is a plain host process and a pod that mounts
a volume fails its mount, as a kubelet reports it: it never runs without its volumes.

Every pod shares this host's network and resolver, so cluster DNS names mean nothing to its
processes. In their place the kubelet rewrites an environment value given literally (``env[].value``)
that is exactly a name the pod could resolve on a cluster (``dns.resolves``: its own hostname, a headless Service or
``<hostname>.<subdomain>`` of a selected pod) to ``127.0.0.1``, deciding when the container starts.
``HOSTNAME`` is the pod's hostname (``spec.hostname``, else the pod name), as in a real container.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_gpu.testing.containers import kill_container
from airflow_gpu.testing.gpus import with_devices
from airflow_gpu.testing.images import ImageSet
from airflow_gpu.testing.kubernetes.container_start import (
    NEVER_STARTED,
    START_ERROR_EXIT_CODE,
    START_ERROR_REASON,
    started_argv,
)
from airflow_gpu.testing.kubernetes.dns import LOOPBACK, pod_hostname
from airflow_gpu.testing.kubernetes.downward import field_ref
from airflow_gpu.testing.kubernetes.objects import now, timestamp, timestamp_nano
from airflow_gpu.testing.kubernetes.volumes import PodVolumes

#: Each container's main process: its own mount and PID namespaces, then ``container_init.py``.
NAMESPACED = (
    "unshare",
    "--mount",
    "--pid",
    "--propagation",
    "private",
    "--fork",  # the fork is unshare's (C): a Python fork costs milliseconds
    "--kill-child",
    "--mount-proc",  # the PID namespace's own /proc, as in a container: ps, pgrep, the nvidia-smi shim
    sys.executable,
    "-I",
    "-S",
    str(Path(__file__).with_name("container_init.py")),
)


@functools.cache
def default_signals() -> tuple[str, ...]:
    """What goes before a command the kubelet runs in a container (exec, preStop) so that it starts
    with every signal at its default, as the container runtime starts it: ``env --default-signal``
    (GNU coreutils 8.31 and later), or nothing where ``env`` lacks it. Without it a process inherits
    what the test runner ignores (a background job ignores SIGINT), and a shell then silently skips
    its ``trap ... INT``: KPO's ``kill -2`` of its xcom sidecar would never end the pod."""
    try:
        works = subprocess.run(["env", "--default-signal", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    return ("env", "--default-signal") if works else ()


#: Host variables a container process inherits (a real container gets its image's instead).
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH", "SYSTEMROOT")


async def read_status(fd: int) -> str:
    """The error ``container_init.py`` reported on its status pipe, or "" once the command runs.

    It writes ``S`` on success, ``F<message>`` on failure; EOF (``unshare`` gone) with neither is
    a failure of its own.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    chunks: list[bytes] = []

    def readable() -> None:
        chunk = os.read(fd, 4096)
        chunks.append(chunk)
        received = b"".join(chunks)
        if chunk and not received.startswith(b"S"):
            return
        loop.remove_reader(fd)
        os.close(fd)
        if received.startswith(b"S"):
            done.set_result("")
        else:
            done.set_result(received[1:].decode("utf-8", errors="replace") or "the container's init exited")

    loop.add_reader(fd, readable)
    return await done


class _ContainerProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The usual stream protocol, plus an event set when the main process exits.

    ``Process.wait()`` (Python 3.11) returns only once every pipe is closed too, and a child the
    main process left running in the background (``sleep 60 &``) keeps its stdout open: the kubelet
    would never see the container's PID 1 exit, nor end the rest of the container.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def start_process(
    command: list[str], **options: Any
) -> tuple[asyncio.subprocess.Process, asyncio.Event, asyncio.SubprocessTransport]:
    """``asyncio.create_subprocess_exec`` that also returns the event of the process's own exit, and
    its transport: closing it before the loop closes is the kubelet's job (``PodRun.release``), or
    its pipes are closed from the garbage collector on a closed loop ("Event loop is closed")."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ContainerProtocol(limit=2**16, loop=loop), *command, **options
    )
    return asyncio.subprocess.Process(transport, protocol, loop), protocol.exited, transport


@dataclass
class ContainerRun:
    name: str
    process: asyncio.subprocess.Process | None = None
    transport: asyncio.SubprocessTransport | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)  # the main process is gone
    lines: list[tuple[str, str]] = field(default_factory=list)  # (RFC 3339 nano timestamp, text)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)  # set once the process exists (or failed to)
    finished: bool = False
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # what its command got, for exec
    namespaced: bool = False  # started under ``unshare`` + ``container_init.py`` (else a plain process)
    termination_file: str | None = None  # the host file mounted at its ``terminationMessagePath``
    message_policy: str = "File"  # its ``terminationMessagePolicy``
    simulated: bool = False  # no process: scripted (``simulation``), for clusters of thousands of pods

    def namespace_pid(self) -> int | None:
        """The host PID of the container's PID 1 (the init ``container_init.py`` forked), or None."""
        if not self.namespaced or self.process is None or self.process.returncode is not None:
            return None
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def append(self, text: str) -> None:
        self.lines.append((timestamp_nano(), text))
        self.changed.set()
        self.changed = asyncio.Event()


#: Whether a value is a cluster DNS name that the pod could resolve (``dns.resolves``, bound to the store).
Resolver = Callable[[dict[str, Any], str], bool]


def container_env(
    pod: dict[str, Any], container: dict[str, Any], api_host: str, api_port: int, resolves: Resolver | None = None
) -> dict[str, str]:
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env |= {
        "HOSTNAME": pod_hostname(pod),
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
    }
    for item in container.get("env") or []:
        name = item.get("name")
        if not name:
            continue
        if "value" in item:
            env[name] = str(item.get("value") or "")
            if resolves is not None and resolves(pod, env[name]):
                env[name] = LOOPBACK  # a host name given literally: its pod is a process on this host
        elif ref := (item.get("valueFrom") or {}).get("fieldRef"):
            env[name] = field_ref(pod, ref.get("fieldPath", ""))
    return env


def argv(container: dict[str, Any]) -> list[str]:
    return [*(container.get("command") or []), *(container.get("args") or [])]


def container_id(run: ContainerRun) -> str | None:
    """``local://<pid>``: the runtime's id of a container is its process here."""
    return f"local://{run.process.pid}" if run.process is not None else None


#: Images whose containers are simulated (no process), for a cluster of thousands of pods on one machine.
SIMULATED_PREFIX = "simulated.local/"


@dataclass(frozen=True)
class Simulation:
    """What a simulated container does: print ``lines``, run ``seconds``, exit with ``exit_code``."""

    seconds: float
    exit_code: int
    lines: tuple[str, ...]
    message: str = ""  # what its termination message file holds when it ends (a profiled workload's end)


def simulation(container: dict[str, Any]) -> Simulation | None:
    """The script of a container whose image is ``simulated.local/<anything>``; None for a real one.

    It is read from the container's ``env`` values: ``SIMULATED_SECONDS`` (default 3600),
    ``SIMULATED_EXIT_CODE`` (0), ``SIMULATED_OUTPUT`` (lines, ``\n``-separated) and ``SIMULATED_MESSAGE`` (what
    its ``terminationMessagePath`` file holds when it ends, as a workload writes it: the provider's profiler
    writes its result and end lines there). A signal ends it at once (SIGTERM: 143), as a workload that exits
    on SIGTERM.
    """
    if not str(container.get("image") or "").startswith(SIMULATED_PREFIX):
        return None
    env = {e.get("name"): str(e.get("value") or "") for e in container.get("env") or [] if "value" in e}
    output = env.get("SIMULATED_OUTPUT", "")
    return Simulation(
        float(env.get("SIMULATED_SECONDS") or 3600),
        int(env.get("SIMULATED_EXIT_CODE") or 0),
        tuple(output.split("\n")) if output else (),
        env.get("SIMULATED_MESSAGE", ""),
    )


class PodRun:
    """The processes of one pod and what they printed."""

    def __init__(self, pod: dict[str, Any]) -> None:
        spec = pod.get("spec") or {}
        self.init_names = [c["name"] for c in spec.get("initContainers") or []]
        self.names = [c["name"] for c in spec.get("containers") or []]
        self.pre_stop = {
            c["name"]: (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
            for c in spec.get("containers") or []
        }
        self.containers = {name: ContainerRun(name) for name in [*self.init_names, *self.names]}
        self._pod_name = pod["metadata"]["name"]
        every = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        self.simulated_names = {c["name"] for c in every if simulation(c) is not None}
        #: Every container is simulated: nothing of the pod exists on this host (no process, no volume).
        self.simulated = len(self.simulated_names) == len(every)
        self.task: asyncio.Task[None] | None = None
        self.terminating = False
        self.gpu_env: dict[str, dict[str, str]] = {}  # container -> its devices (the device plugin)
        self.resolves: Resolver | None = None  # cluster DNS names to this host (set by the cluster)
        #: The pod's volumes, once made; None where this machine has no mount namespaces.
        self.volumes: PodVolumes | None = None
        self.images: ImageSet | None = None  # the images declared to the cluster (set by the cluster)

    @functools.cached_property
    def workdir(self) -> str:
        """The pod's directory on this host, made when first needed: a simulated pod never needs one,
        and ten thousand of them leave no ten thousand directories behind."""
        return tempfile.mkdtemp(prefix=f"kubelet-{self._pod_name}-")

    def release(self) -> None:
        """Undo what the pod left on this host: its processes' pipes, its volumes (tmpfs mounts) and
        its work directory."""
        for run in self.containers.values():
            if run.transport is not None:
                run.transport.close()
        if self.volumes is not None:
            self.volumes.release()
        if "workdir" in self.__dict__:  # made (cached_property keeps it there)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def finish(self, exit_code: int) -> list[str]:
        """End every simulated container that has not ended with ``exit_code``, now: the workload is
        done (one not started yet ends as soon as it starts). The names of those it ended."""
        ended = []
        for name, run in self.containers.items():
            if not run.finished and not run.exited.is_set() and (run.simulated or name in self.simulated_names):
                run.exit_code = exit_code
                run.exited.set()
                ended.append(name)
        return ended

    def is_running(self) -> bool:
        """Whether any container still runs, a process or a simulated one."""
        return bool(self.running_processes()) or any(
            run.simulated and run.started.is_set() and not run.finished for run in self.containers.values()
        )

    def running_processes(self) -> list[asyncio.subprocess.Process]:
        return [
            run.process
            for run in self.containers.values()
            if run.process is not None and run.process.returncode is None
        ]

    def signal_all(self, signum: int) -> None:
        """SIGTERM goes to each container's main process only, as the runtime sends it to PID 1 (a
        shell that does not pass it on keeps its children running until SIGKILL); SIGKILL ends the
        whole container, children included."""
        for run in self.containers.values():
            if run.simulated:  # a simulated workload exits on SIGTERM (143) or SIGKILL (137)
                if not run.exited.is_set():
                    run.exit_code = 128 + signum
                    run.exited.set()
                continue
            process = run.process
            if process is None or process.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if signum == signal.SIGKILL:
                    kill_container(process.pid)
                else:  # to the container's PID 1 (``unshare`` blocks SIGTERM and SIGINT), which passes it on
                    os.kill(run.namespace_pid() or process.pid, signum)

    async def run_pre_stop_hooks(self, grace_seconds: float) -> None:
        """``lifecycle.preStop.exec`` of running containers, within the grace period, as the kubelet does."""
        hooks = [
            (run, self.pre_stop[name])
            for name, run in self.containers.items()
            if self.pre_stop.get(name) and run.process is not None and run.process.returncode is None
        ]
        for run, command in hooks:
            assert command is not None
            pid = run.namespace_pid()  # in the container's namespaces, with its environment, as exec
            prefix = (
                [*default_signals(), "nsenter", f"--target={pid}", "--mount", "--pid", "--"] if pid is not None else []
            )
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                hook = await asyncio.create_subprocess_exec(
                    *prefix,
                    *command,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=run.env or None,
                )
                try:
                    await asyncio.wait_for(hook.wait(), timeout=max(grace_seconds, 1))
                finally:  # a hook past the grace period is killed with its container, and reaped here
                    if hook.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            hook.kill()
                        await hook.wait()

    async def stop(self, grace_seconds: float) -> None:
        """preStop hooks, SIGTERM, wait for the grace period, then SIGKILL what is left."""
        self.terminating = True
        if grace_seconds > 0:
            await self.run_pre_stop_hooks(grace_seconds)
        self.signal_all(signal.SIGTERM)
        running = [run for run in self.containers.values() if run.process is not None and not run.exited.is_set()]
        if running and grace_seconds > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(run.exited.wait() for run in running)), timeout=grace_seconds)
        self.signal_all(signal.SIGKILL)
        for run in running:
            await run.exited.wait()

    async def run_container(
        self, pod: dict[str, Any], container: dict[str, Any], api: tuple[str, int]
    ) -> dict[str, Any]:
        """Start one container, stream its output, and return its terminated state."""
        run = self.containers[container["name"]]
        command = argv(container)
        workdir = container.get("workingDir")
        run.started_at = timestamp()
        script = simulation(container)
        if script is not None:
            return await self._simulate(run, script)
        started = started_argv(self.images, container) if self.images is not None else None
        if started is not None:
            command, refusal = started
            if refusal is not None:  # containerd's StartContainer failed: the process never existed
                state = self._terminated(run, START_ERROR_EXIT_CODE, START_ERROR_REASON, refusal)
                return {**state, "startedAt": NEVER_STARTED}
        if not command:
            return self._cannot_run(run, "no command: the emulator runs command/args as a local process")
        env = with_devices(
            container_env(pod, container, *api, resolves=self.resolves), self.gpu_env.get(container["name"], {})
        )
        if started is not None and self.images is not None:  # the image's PATH: the host's, less what it lacks
            env = self.images.environment(str(container.get("image")), env)
        scratch = Path(self.workdir) / "tmp" / str(container.get("name"))  # each container's own, as its /tmp is
        hidden = any(scratch.is_relative_to(str(m.get("mountPath"))) for m in container.get("volumeMounts") or [])
        if not hidden and not any(item.get("name") == "TMPDIR" for item in container.get("env") or []):
            # A container's /tmp is its own, gone with the pod: torchrun's log directories and the like go
            # with the pod's work directory here, not into the host's /tmp (the suite left 2,000 there). Not
            # where a volume the container mounts (at /tmp, say) would hide it: that volume is its /tmp then.
            scratch.mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(scratch)
        run.env = env
        if self.volumes is None:  # no mount namespaces on this machine: the host's file system
            cwd = workdir if workdir and Path(workdir).is_dir() else self.workdir
            launch, options = command, {"cwd": cwd}
        else:
            status_read, status_write = os.pipe()
            run.namespaced = True
            launch = [
                *NAMESPACED,
                str(status_write),
                workdir or self.workdir,
                self.workdir,
                "1" if "LC_CTYPE" in env else "0",
            ]
            mounts = self.volumes.container_mounts(container)
            if (log_mount := self.volumes.termination_log(container)) is not None:
                mounts.append(log_mount)
                run.termination_file = log_mount["source"]
            run.message_policy = str(container.get("terminationMessagePolicy") or "File")
            launch += [
                str(len(mounts)),
                *(f for m in mounts for f in (m["source"], m["target"], "1" if m["readOnly"] else "0")),
            ]
            launch += ["--", *command]
            options = {"cwd": self.workdir, "pass_fds": (status_write,)}
        try:
            run.process, run.exited, run.transport = await start_process(
                launch,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own session: kill_container ends every process in it
                **options,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError, OSError) as error:
            return self._cannot_run(run, f'exec: "{command[0]}": {error.strerror or error}')
        finally:
            if self.volumes is not None:
                os.close(status_write)
        if self.volumes is not None:
            failure = await read_status(status_read)
            if failure:
                await run.exited.wait()
                kill_container(run.process.pid)
                return self._cannot_run(run, failure)
        run.started.set()
        if self.terminating:  # stopped while it was starting: nothing else would ever signal it
            kill_container(run.process.pid)
        reader = asyncio.get_running_loop().create_task(self._read_output(run, run.process))
        await run.exited.wait()
        code = run.process.returncode
        assert code is not None
        kill_container(run.process.pid)  # PID 1 is gone: so is its container
        await reader
        run.exit_code = 128 - code if code < 0 else code  # killed by signal N -> 128 + N
        message = termination_message(run, MAX_POD_MESSAGE_BYTES // len(self.containers))
        return self._terminated(run, run.exit_code, "Completed" if run.exit_code == 0 else "Error", message)

    async def _simulate(self, run: ContainerRun, script: Simulation) -> dict[str, Any]:
        """A container without a process: it prints its lines, runs its time (or until stopped), exits."""
        run.simulated = True
        run.started.set()
        if self.terminating:
            run.exit_code = 143
            run.exited.set()
        for line in script.lines:
            run.append(line)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.exited.wait(), timeout=script.seconds)
        code = run.exit_code if run.exited.is_set() and run.exit_code is not None else script.exit_code
        run.exited.set()
        run.exit_code = code
        message = kept_message(script.message.encode(), MAX_POD_MESSAGE_BYTES // len(self.containers))
        return self._terminated(run, code, "Completed" if code == 0 else "Error", message)

    @staticmethod
    async def _read_output(run: ContainerRun, process: asyncio.subprocess.Process) -> None:
        """The container's output, line by line, however long a line: the container runtime splits a line
        past 16 KiB into partial records and the kubelet joins them again for ``pods/log`` (``readline``
        gave up at the stream's 64 KiB limit, and the pod never ended)."""
        assert process.stdout is not None
        pending = bytearray()
        while chunk := await process.stdout.read(2**16):
            pending += chunk
            *lines, rest = pending.split(b"\n")
            for line in lines:
                run.append(line.decode("utf-8", errors="replace"))
            pending = bytearray(rest)
        if pending:
            run.append(pending.decode("utf-8", errors="replace"))

    def _cannot_run(self, run: ContainerRun, message: str) -> dict[str, Any]:
        run.append(message)
        run.exit_code = 127
        return self._terminated(run, 127, "ContainerCannotRun", message)

    @staticmethod
    def _terminated(run: ContainerRun, code: int, reason: str, message: str | None = None) -> dict[str, Any]:
        run.started.set()
        run.finished = True
        run.finished_at = timestamp()
        run.changed.set()
        state: dict[str, Any] = {
            "exitCode": code,
            "reason": reason,
            "startedAt": run.started_at,
            "finishedAt": run.finished_at,
            "containerID": container_id(run) or "local://0",
        }
        if message:
            state["message"] = message
        return state


#: What the kubelet keeps of a termination message (``MaxContainerTerminationMessageLength``), and of the
#: log's tail with ``FallbackToLogsOnError`` (``MaxContainerTerminationMessageLogLength``, ``...LogLines``).
MAX_MESSAGE_BYTES = 4096
MAX_FALLBACK_BYTES = 2048
MAX_FALLBACK_LINES = 80
#: All of a pod's messages together (``normalizeStatus``): each container keeps the start of its share.
MAX_POD_MESSAGE_BYTES = 12 * 1024


def termination_message(run: ContainerRun, share: int = MAX_POD_MESSAGE_BYTES) -> str | None:
    """The ended container's ``terminated.message``, as the kubelet makes it: the last 4096 bytes of the file
    at its ``terminationMessagePath`` (``tail.ReadAtMost``); with ``FallbackToLogsOnError``, a failed
    container's log tail when the file is empty; then cut to the container's ``share`` of the pod's 12 KiB,
    keeping its start (``normalizeStatus``). None without a message (a container run as a plain host
    process has no file: no mount namespace to put it in)."""
    data = b""
    if run.termination_file is not None:
        with contextlib.suppress(OSError):
            data = Path(run.termination_file).read_bytes()
    if data:
        return kept_message(data, share)
    if run.message_policy == "FallbackToLogsOnError" and run.exit_code:
        tail = "".join(line + "\n" for _, line in run.lines[-MAX_FALLBACK_LINES:])  # as the log file has them
        return tail.encode()[-MAX_FALLBACK_BYTES:][:share].decode("utf-8", "replace") or None
    return None


def kept_message(data: bytes, share: int) -> str | None:
    """What the kubelet keeps of a termination message file: its last 4096 bytes, cut to the container's
    ``share`` of the pod's 12 KiB from the start; None when empty."""
    return data[-MAX_MESSAGE_BYTES:][:share].decode("utf-8", "replace") or None


def container_status(
    container: dict[str, Any], state: dict[str, Any], container_id: str | None = None
) -> dict[str, Any]:
    """A ``V1ContainerStatus`` dict; ``state`` is ``{"waiting"|"running"|"terminated": {...}}``."""
    status = {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": f"local://{container.get('image', '')}",
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }
    if container_id:
        status["containerID"] = container_id
    return status


def log_lines(
    run: ContainerRun,
    timestamps: bool,
    since_seconds: int | None = None,
    since_time: str | None = None,
    tail_lines: int | None = None,
    start: int = 0,
) -> list[str]:
    """The stored lines as the log endpoint sends them."""
    lines = run.lines[start:]
    if since_seconds is not None:
        cutoff = timestamp_nano(now() - timedelta(seconds=since_seconds))
        lines = [item for item in lines if item[0] >= cutoff]
    if since_time is not None:
        lines = [item for item in lines if item[0][:19] >= since_time[:19]]
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    return [f"{stamp} {text}\n" if timestamps else f"{text}\n" for stamp, text in lines]

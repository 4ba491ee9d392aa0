"""``accelerate launch`` on the worker itself: the ``local`` target of ``AccelerateTrainOperator``.

The launcher runs in a session of its own. Its ranks do not stay in it: torch's elastic agent
(what ``accelerate launch --multi_gpu`` runs) starts each rank in a new session, so a signal to the
launcher's group would miss them. Every process the launcher started is therefore tracked while it
runs (``ProcessTree``), and ``on_kill``, ``execution_timeout`` or any error ends them all: SIGTERM
(the agent passes it to the ranks, which may checkpoint), then SIGKILL after
``KILL_GRACE_SECONDS`` to whatever still runs. No rank outlives the task.

The launcher's output streams into the task log line by line; the result line and the profile are
read from it as the other targets read their pod or job log (``utils.results.read_output``). The
GPUs are sampled in this process (NVML, else nvidia-smi) while the launcher runs, and the profile
is built by the same code as the containers' entrypoint.

A spec that asks for GPUs gets them or the task fails before anything starts: a worker that sees
fewer (none at all included) is refused with what it sees (``CUDA_VISIBLE_DEVICES``, NVML's or
``nvidia-smi``'s count), never quietly trained on CPU for hours where the spec asked for H100s. The
check runs at execute time, on the worker: parsing the DAG file cannot see the worker's GPUs. Train
on CPU (gloo, as many processes) by giving no ``accelerator``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu.operators.gpu_profile import publish_profile
from airflow_gpu.operators.spot_task import bad_result
from airflow_gpu.profiling.marker import PROFILE_MARKER
from airflow_gpu.utils.results import RESULT_MARKER, missing_result, read_output

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.accelerators.accelerate import AccelerateLaunch

#: After SIGTERM, how long the ranks get to save a checkpoint before SIGKILL.
KILL_GRACE_SECONDS = 30.0
#: Lines of output kept to explain a failure (the task log has them all).
TAIL_LINES = 20


class ProcessTree:
    """The launcher and every process it started, seen while they run: a rank whose parent died is
    no longer in the launcher's tree, so what was seen is kept (psutil checks a pid's start time, so
    a reused pid is never taken for a rank)."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.seen: dict[int, Any] = {pid: self.root}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(interval,), name="launcher-tree", daemon=True)
        self._watcher.start()

    def _watch(self, interval: float) -> None:
        while not self._done.wait(interval):
            self.refresh()

    def refresh(self) -> None:
        import psutil

        try:
            children = self.root.children(recursive=True)
        except psutil.Error:  # the launcher has ended: what it started is what was seen
            return
        with self._lock:
            self.seen.update((child.pid, child) for child in children)

    def alive(self) -> list[Any]:
        with self._lock:
            known = list(self.seen.values())
        return [process for process in known if _running(process)]  # psutil.Process, untyped

    def end(self, grace: float) -> list[Any]:
        """SIGTERM to every process still running, SIGKILL to those that outlive ``grace``; the killed."""
        import psutil

        self.refresh()
        self._done.set()
        running = self.alive()
        for process in running:
            with contextlib.suppress(psutil.Error):
                process.terminate()
        _, left = psutil.wait_procs(running, timeout=grace)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=10)
        return left


def _running(process: Any) -> bool:
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def gpu_census() -> tuple[int, str]:
    """NVIDIA GPUs this worker can use, and how that was seen (for a refusal's message).

    NVML's device count, else ``nvidia-smi -L``'s, else none; then ``CUDA_VISIBLE_DEVICES`` as CUDA
    reads it: the entries before the first invalid one (empty, negative), at most as many as there
    are devices.
    """
    try:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
        seen = f"NVML counts {count} GPU(s)"
    except Exception as error:
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as smi_error:
            return 0, f"no NVIDIA driver (NVML: {error or type(error).__name__}; nvidia-smi: {smi_error})"
        if listed.returncode != 0:
            said = (listed.stdout or listed.stderr).strip().splitlines()[:1]
            return 0, f"no NVIDIA driver (NVML: {error or type(error).__name__}; nvidia-smi -L: {' '.join(said)})"
        count = sum(line.startswith("GPU ") for line in listed.stdout.splitlines())
        seen = f"nvidia-smi -L lists {count} GPU(s)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count, f"{seen}, CUDA_VISIBLE_DEVICES is not set"
    # a worker pinned to some of the host's GPUs: CUDA stops at the first invalid entry
    entries = [d.strip() for d in visible.split(",")]
    usable = next((i for i, d in enumerate(entries) if not d or d.startswith("-")), len(entries))
    return min(count, usable), f"{seen}, CUDA_VISIBLE_DEVICES={visible!r}"


def visible_gpus() -> int:
    """NVIDIA GPUs this worker can use (``gpu_census``'s count)."""
    return gpu_census()[0]


class LocalTraining:
    """One ``accelerate launch`` subprocess and what it left: the result, the profile."""

    def __init__(self, launch: AccelerateLaunch, env: dict[str, str], *, gpu_profile: bool, interval: float, log: Any):
        self.launch, self.env, self.gpu_profile, self.interval, self.log = launch, env, gpu_profile, interval, log
        self.process: subprocess.Popen[bytes] | None = None
        self.tree: ProcessTree | None = None
        self._killed = threading.Event()

    def _prepared(self) -> AccelerateLaunch:
        """The launch as asked, once the worker is seen to have the GPUs it asks for; CPU only when
        the spec asks for no accelerator (the launch is then on CPU already)."""
        wanted = self.launch.gpus_per_machine
        if not wanted:
            return self.launch
        found, seen = gpu_census()
        if found >= wanted:
            return self.launch
        raise AirflowFailException(
            f"accelerator {self.launch.accelerator} asks for {wanted} GPU(s) on this worker "
            f"({os.uname().nodename}); it can use {found}: {seen}. target='local' runs on the worker itself "
            "and does not train on CPU in place of the GPUs asked for. Run it on the GPUs with "
            "target='kubernetes' or target='batch', give a worker that has them (a queue of GPU workers), "
            "or train on CPU by giving no accelerator (accelerator=None)."
        )

    def command(self, launch: AccelerateLaunch) -> list[str]:
        """``accelerate launch`` from this interpreter's environment, whether or not its bin is on PATH."""
        argv = launch.argv()
        return [sys.executable, "-m", "accelerate.commands.launch", *argv[2:]]

    def run(self, context: Context) -> Any:
        launch = self._prepared()
        argv = self.command(launch)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **launch.environment(), **self.env}
        sampler = self._start_sampler(env) if self.gpu_profile and launch.gpus_per_machine else None
        self.log.info("Running %s", " ".join(argv))
        started = time.time()
        kept: list[str] = []  # the result and profile lines
        tail: deque[str] = deque(maxlen=TAIL_LINES)  # the last lines, for the failure message
        try:
            self.process = subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as error:
            raise AirflowFailException(f"accelerate launch could not start: {error}") from error
        self.tree = ProcessTree(self.process.pid)
        try:
            assert self.process.stdout is not None
            for raw in iter(self.process.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith((RESULT_MARKER, PROFILE_MARKER)):
                    kept.append(line)
                else:
                    tail.append(line)
                    self.log.info("%s", line)
            code = self.process.wait()
        finally:  # an error here (execution_timeout) ends the ranks as on_kill does; after a clean end, the stragglers
            self._end(KILL_GRACE_SECONDS)
        profile_lines = self._profile_lines(sampler, started, code) if sampler is not None else []
        output = read_output([*kept, *profile_lines])
        if self.gpu_profile and launch.gpus_per_machine:
            self._publish_profile(context, output)
        if self._killed.is_set():
            raise AirflowException("the task was killed; the training processes were stopped")
        if code != 0:
            shown = "\n".join(tail)
            raise AirflowException(f"accelerate launch exited with {_exit(code)}; its last lines:\n{shown}")
        if output.result_error is not None:
            raise bad_result(output.result_error) from output.result_error
        if not output.result_found:
            self.log.warning("%s", missing_result("the training (accelerate launch on this worker)", None))
            return None
        return output.result

    def _end(self, grace: float) -> None:
        """No rank outlives the launcher: SIGTERM to each process still running, then SIGKILL."""
        if self.tree is None:
            return
        left = self.tree.end(grace)
        if left:
            self.log.warning("%d training process(es) outlived %ss after SIGTERM and were killed", len(left), grace)

    def on_kill(self) -> None:
        """SIGTERM to the launcher and every rank; SIGKILL to what still runs after the grace period."""
        self._killed.set()
        self._end(KILL_GRACE_SECONDS)

    # --- profiling in this process --------------------------------------------------------

    def _start_sampler(self, env: dict[str, str]) -> Any:
        from airflow_gpu.profiling.entrypoint import choose_sampler

        try:
            sampler, notes = choose_sampler(env, self.interval)
        except Exception as error:  # the training runs whatever the profiler does
            self.log.warning("GPU profile: %s: %s", type(error).__name__, error)
            return None
        for note in notes:
            self.log.warning("GPU profile: %s", note)
        return sampler

    def _profile_lines(self, sampler: Any, started: float, code: int) -> list[str]:
        from airflow_gpu.profiling import marker
        from airflow_gpu.profiling.entrypoint import exit_code, payload

        try:
            sampler.stop()
            built, samples = payload(
                sampler, notes=[sampler.note] if sampler.note else [], interval=self.interval, started=started,
                ended=time.time(), code=exit_code(code), signals=[], spot_notice=None,
            )  # fmt: skip
            return marker.render(built, samples)
        except Exception as error:
            self.log.warning("GPU profile was not built: %s: %s", type(error).__name__, error)
            return []

    def _publish_profile(self, context: Context, output: Any) -> None:
        accelerator = self.launch.accelerator
        assert accelerator is not None
        publish_profile(
            context, output if output.profile_printed else None, run=None, accelerator=accelerator, backend="local",
            workload=f"{os.uname().nodename} (worker)", instance_type=None, log=self.log,
            unread=None if output.profile_printed else "the GPUs could not be sampled on the worker",
        )  # fmt: skip


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"

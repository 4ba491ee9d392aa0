"""The profiling entrypoint as the container runs it: ``wrap(...)`` executed by ``/bin/sh``, a real child
process, real signals, a real HTTP server standing in for the EC2 instance metadata service on
127.0.0.1. Fakes only at the hardware boundary: a fake ``pynvml`` on PYTHONPATH (``fake_nvml``) or a
fake ``nvidia-smi`` on PATH (``fake_nvidia_smi``); each test's docstring says which it uses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu.profiling.bundle import NO_PYTHON, wrap
from airflow_gpu.profiling.entrypoint import exit_code, finish
from airflow_gpu.profiling.marker import PROFILE_MARKER, read_profile
from airflow_gpu.profiling.termination import read

from . import fake_nvidia_smi
from .fake_nvml import FakeGpu, FakeNvml, install

NOTICE_TIME = "2026-11-23T15:00:00Z"
TRAP = """
import signal, sys
def stop(number, frame):
    print("child got", signal.Signals(number).name, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
while True:
    signal.pause()
"""
# The workload waits for a file to appear (the notice, or the IMDS stand-in's sign that it was polled).
WAIT_FOR_FILE = """
import os, sys, time
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(5)
    time.sleep(0.02)  # the workload polls for the file the test writes
print("saw", open(sys.argv[1]).read().strip(), flush=True)
"""


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """The container's environment: ``python3`` (this interpreter) and the shell's tools on PATH, a
    driver-less fake NVML on PYTHONPATH (so that no real GPU of a machine running the tests is seen),
    no nvidia-smi, IMDS polling off, samples every 0.05 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_GPU_", "AWS_EC2_METADATA"))}
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):  # a GPU machine's own choice of its GPUs
        env.pop(name, None)
    env.update(install(tmp_path / "no-driver", FakeNvml([], no_driver=True)))
    env.update(PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", AIRFLOW_GPU_IMDS="off")
    env["AIRFLOW_GPU_PROFILE_INTERVAL"] = "0.05"
    return env


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wrap(command), env=env, capture_output=True, text=True, timeout=60)


def profile(stdout: str) -> dict[str, Any]:
    payload, why = read_profile(stdout.splitlines())
    assert why is None and payload is not None, why
    return payload


def test_the_exit_code_passes_through_and_the_marker_ends_the_output(machine: dict[str, str]) -> None:
    """Fake driver-less NVML on PYTHONPATH, no nvidia-smi: an empty profile with a note, and one log line."""
    done = run(["sh", "-c", "echo out; echo err >&2; printf 'no newline'; exit 7"], machine)
    assert done.returncode == 7
    lines = done.stdout.splitlines()
    assert lines[:2] == ["out", "no newline"] and all(line.startswith(PROFILE_MARKER) for line in lines[2:])
    got = profile(done.stdout)
    assert (got["source"], got["exit_code"], got["samples_taken"], got["summary"], got["gpus"]) == (
        "none", 7, 0, [], [],
    )  # fmt: skip
    assert got["note"] == (
        "no GPU profile: NVML: no NVIDIA driver (NVML Shared Library Not Found); "
        "nvidia-smi: nvidia-smi not found on PATH"
    )
    assert got["interval"] == 0.05 and got["started"] <= got["ended"] and got["signals"] == []
    # The child and the profiler write to one stderr side by side: in either order.
    assert sorted(done.stderr.splitlines()) == sorted(["err", f"airflow-gpu: {got['note']}"])


def test_a_child_killed_by_a_signal_exits_as_a_shell_reports_it(machine: dict[str, str]) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); the child kills itself with SIGKILL, as the OOM killer would."""
    done = run(["sh", "-c", "kill -KILL $$"], machine)
    assert done.returncode == 137 and profile(done.stdout)["exit_code"] == 137


def test_a_command_that_does_not_exist_is_127_with_a_profile(machine: dict[str, str]) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); the command is not on PATH."""
    done = run(["no-such-workload", "--epochs", "3"], machine)
    assert done.returncode == 127 and "no-such-workload" in done.stderr
    assert "did not start" in profile(done.stdout)["note"]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_signals_are_forwarded_and_the_child_decides(machine: dict[str, str], name: str) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH). The entrypoint is the process the runtime signals
    (``sh`` and ``python3`` both exec); the child traps the signal, says so and exits 0."""
    process = subprocess.Popen(
        wrap([sys.executable, "-c", TRAP]), env=machine, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        process.send_signal(getattr(signal, name))
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0 and out.startswith(f"child got {name}\n")
    got = profile(out)
    assert got["signals"] == [name] and got["exit_code"] == 0


def terminated_when_ready(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``command`` wrapped, SIGTERM the entrypoint once the workload printed "ready"; (exit code, output)."""
    process = subprocess.Popen(wrap(command), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        process.terminate()
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    return process.returncode, out


def test_a_child_that_does_not_trap_sigterm_ends_with_143(machine: dict[str, str]) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); the child is ``sleep``, which SIGTERM ends."""
    code, out = terminated_when_ready(["sh", "-c", "echo ready; exec sleep 30"], machine)
    assert code == 143
    got = profile(out)
    assert got["signals"] == ["SIGTERM"] and got["exit_code"] == 143


def test_a_workload_under_a_shell_gets_the_sigterm_the_shell_would_not_pass_on(machine: dict[str, str]) -> None:
    """``sh -c "python train.py; echo after"``: the shell stays, and does not pass SIGTERM on. The
    entrypoint signals the child's whole process group (as ``tini -g``), so the workload gets it
    and may checkpoint, instead of dying with its shell when the container ends."""
    script = f"{sys.executable} -c '{TRAP.replace(chr(39), chr(34))}'; echo shell went on"
    _, out = terminated_when_ready(["sh", "-c", script], machine)
    assert out.startswith("child got SIGTERM\n")  # the workload, a grandchild, trapped it
    assert profile(out)["signals"] == ["SIGTERM"]


def sampler_reader_thread(pid: int, smi: Path, timeout: float = 20.0) -> int:
    """The id of the nvidia-smi sampler's reader thread in entrypoint process ``pid`` (Linux): once
    its sampling ``nvidia-smi -lms`` child runs and the thread that started it has ended, the only
    thread besides the main one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sampling = any(
            p.name.isdigit() and str(smi) in cmdline(p) and "-lms=" in cmdline(p) for p in Path("/proc").iterdir()
        )
        with contextlib.suppress(OSError):
            others = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid]
            if sampling and len(others) == 1:
                return others[0]
        time.sleep(0.02)  # the sampler starts after nvidia-smi answered its first queries
    raise AssertionError(f"the entrypoint {pid} did not settle to its sampler's reader thread in {timeout} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread id as a kill(2) target is Linux's")
def test_a_sigterm_the_kernel_hands_to_a_sampler_thread_still_reaches_the_workload(
    machine: dict[str, str], tmp_path: Path
) -> None:
    """POSIX delivers a process-directed signal to any one thread that does not block it, and CPython
    runs the handler in the main thread only, when that thread next runs Python code. The runtime's
    SIGTERM that lands on the nvidia-smi sampler's reader thread must still reach the workload within
    the grace period, not wait for the main thread's ``waitpid`` to return (it never would: the
    workload is waiting for the signal), leaving SIGKILL to end it without its checkpoint.

    ``kill(2)`` given the id of a thread that is not the main one sends the same process-directed
    signal, delivered to that thread first (Linux ``complete_signal``): a thread the kernel may pick
    for any ``kill`` of the process, picked here on purpose."""
    fake_nvidia_smi.install(tmp_path / "smi", [fake_nvidia_smi.gpu(0)])
    env = {**machine, "PATH": f"{tmp_path / 'smi'}{os.pathsep}{machine['PATH']}"}
    process = subprocess.Popen(wrap([sys.executable, "-c", TRAP]), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        os.kill(sampler_reader_thread(process.pid, tmp_path / "smi"), signal.SIGTERM)
        out: str | None = process.communicate(timeout=10)[0]  # a Kubernetes grace period of 10 s
    except subprocess.TimeoutExpired:
        out = None
    finally:
        process.kill()
        process.wait()
    assert out is not None, "the workload never got the SIGTERM: SIGKILL would end it without its checkpoint"
    assert process.returncode == 0 and out.startswith("child got SIGTERM\n")
    got = profile(out)
    assert got["signals"] == ["SIGTERM"] and got["source"] == "nvidia-smi"


#: A workload that the shell leaves running when it exits: it writes argv[2] once it traps SIGTERM,
#: and argv[1] when it got SIGTERM (then exits); else it runs for a minute.
BACKGROUND_WORKLOAD = """
import pathlib, signal, sys, time
def stop(number, frame):
    pathlib.Path(sys.argv[1]).write_text(signal.Signals(number).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[2]).write_text("ready")
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc tells when the shell has been reaped")
@pytest.mark.parametrize(
    ("hung", "thread_name"),
    [("start", "airflow-gpu-profiler-start"), ("stop", "airflow-gpu-nvml-sampler")],
)
def test_a_sigterm_a_sampler_thread_takes_after_the_command_ended_still_reaches_the_workload(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, hung: str, thread_name: str
) -> None:
    """The command's shell has exited, its workload runs on in the group, and the main thread waits
    for the samplers: to start (``nvmlInit`` hangs, a GPU off the bus) or to stop (a reading hangs).
    The runtime's SIGTERM, which the kernel hands to the thread that hangs (``pthread_kill`` to that
    thread here, the delivery Linux may pick for a ``kill`` of the process), must reach the workload
    in well under the 10 s those waits may last, as while the command runs. In process, with a fake
    ``pynvml`` whose start or readings block until the test releases them."""
    from airflow_gpu.profiling import entrypoint

    release, hang, hanging = threading.Event(), threading.Event(), threading.Event()
    nvml = FakeNvml([FakeGpu()])
    init, reading = nvml.nvmlInit, nvml.nvmlDeviceGetUtilizationRates

    def hung_init() -> None:
        hanging.set()
        release.wait(30)
        init()

    def hung_reading(handle: Any) -> Any:
        if hang.is_set() and threading.current_thread().name == "airflow-gpu-nvml-sampler":
            hanging.set()
            release.wait(30)
        return reading(handle)

    if hung == "start":
        nvml.nvmlInit = hung_init  # type: ignore[method-assign]
    else:
        nvml.nvmlDeviceGetUtilizationRates = hung_reading  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("AIRFLOW_GPU_PROFILER", "nvml")
    monkeypatch.setenv("AIRFLOW_GPU_IMDS", "off")
    workload, got, ready, shell, go = (tmp_path / name for name in ("w.py", "got", "ready", "shell", "go"))
    workload.write_text(BACKGROUND_WORKLOAD)
    script = f"{sys.executable} {workload} {got} {ready} & echo $$ > {shell}; while [ ! -e {go} ]; do sleep 0.02; done"
    latency: list[float] = []

    def runtime() -> None:
        try:
            wait_until(ready.exists, "the workload to trap SIGTERM")
            if hung == "stop":
                wait_until(lambda: any(t.name == thread_name for t in threading.enumerate()), "the sampler")
                hang.set()
            wait_until(hanging.is_set, f"the {hung} to hang")
            go.touch()  # the shell exits; the main thread reaps it and waits for the samplers
            wait_until(lambda: shell.exists() and not Path(f"/proc/{shell.read_text().strip()}").exists(), "reaped")
            time.sleep(0.3)  # into the wait
            target = next(t for t in threading.enumerate() if t.name == thread_name)
            assert target.ident is not None
            signal.pthread_kill(target.ident, signal.SIGTERM)
            sent = time.monotonic()
            with contextlib.suppress(AssertionError):
                wait_until(got.exists, "the workload to get SIGTERM", timeout=3.0)
                latency.append(time.monotonic() - sent)
        finally:
            release.set()

    driver = threading.Thread(target=runtime, name="test-runtime", daemon=True)
    driver.start()
    try:
        code = entrypoint.main(["sh", "-c", script], interval=0.05)
    finally:
        release.set()
        driver.join(30)
    waiting = "starting" if hung == "start" else "stopping"
    assert latency, f"the workload got no SIGTERM within 3 s of it, while the samplers were {waiting}"
    assert latency[0] < 1.0 and got.read_text() == "SIGTERM" and code == 0
    assert profile(capsys.readouterr().out)["signals"] == ["SIGTERM"]


def wait_until(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.01)  # the test's own poll of files and threads it does not control


class Imds:
    """IMDSv2 on 127.0.0.1: a token for a PUT with a TTL header; spot/instance-action needs the token."""

    def __init__(self, polled: Path, notice: bool) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                imds.requests.append(("PUT", self.path, {k.lower(): v for k, v in self.headers.items()}))
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self.answer(400)
                self.answer(200, "AQAEAtoken==")

            def do_GET(self) -> None:
                imds.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
                if self.headers.get("X-aws-ec2-metadata-token") != "AQAEAtoken==":
                    return self.answer(401)
                if self.path != "/latest/meta-data/spot/instance-action":
                    return self.answer(404)
                if notice:
                    self.answer(200, json.dumps({"action": "terminate", "time": NOTICE_TIME}))
                else:
                    self.answer(404, "Not Found")
                polled.touch()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Imds:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def imds_env(machine: dict[str, str], tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    notice_file = tmp_path / "spot" / "pod-1" / "spot-notice"  # its folder does not exist yet
    yield {**machine, "AIRFLOW_GPU_IMDS": "auto", "AIRFLOW_GPU_SPOT_NOTICE_FILE": str(notice_file)}, notice_file


def test_a_spot_notice_is_written_once_and_recorded(imds_env: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); a real HTTP server as IMDS with a notice. The workload
    waits for the notice file, as a training loop that checkpoints on it would."""
    env, notice_file = imds_env
    with Imds(tmp_path / "polled", notice=True) as imds:
        done = run([sys.executable, "-c", WAIT_FOR_FILE, str(notice_file)], {**env, **endpoint(imds)})
    assert done.returncode == 0 and done.stdout.startswith(f"saw {NOTICE_TIME}\n")
    assert notice_file.read_text() == NOTICE_TIME + "\n"
    got = profile(done.stdout)
    assert got["spot_notice"] == NOTICE_TIME and "spot notices" not in (got["note"] or "")
    assert f"spot interruption notice: the instance is reclaimed at {NOTICE_TIME}" in done.stderr
    put, get = imds.requests[0], imds.requests[1]
    assert put[:2] == ("PUT", "/latest/api/token") and put[2]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert get[:2] == ("GET", "/latest/meta-data/spot/instance-action") and get[2]["x-aws-ec2-metadata-token"]
    assert [r[0] for r in imds.requests].count("GET") == 1  # a notice ends the polling


def test_no_notice_is_404_and_no_file(imds_env: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); IMDS answers 404: no notice. The workload lasts until
    IMDS has been polled once."""
    env, notice_file = imds_env
    polled = tmp_path / "polled"
    with Imds(polled, notice=False) as imds:
        done = run([sys.executable, "-c", WAIT_FOR_FILE, str(polled)], {**env, **endpoint(imds)})
    assert done.returncode == 0 and not notice_file.exists()
    got = profile(done.stdout)
    assert got["spot_notice"] is None and "spot" not in (got["note"] or "")


def test_an_unreachable_imds_stops_polling_with_a_note(imds_env: tuple[dict[str, str], Path]) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH); nothing listens where IMDS should be."""
    env, notice_file = imds_env
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run(["true"], {**env, "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert done.returncode == 0 and not notice_file.exists()
    assert f"spot notices not watched: no IMDSv2 token from http://127.0.0.1:{port}" in profile(done.stdout)["note"]


def endpoint(imds: Imds) -> dict[str, str]:
    return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.endpoint}


def test_nvml_profiles_the_run(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake NVML (two A10Gs, the second MIG-enabled) on PYTHONPATH as ``pynvml``; the entrypoint is real."""
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-8a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", mig=True)])
    env = {**machine, **install(tmp_path / "driver", fake)}
    done = run(["sh", "-c", "exit 0"], env)
    got = profile(done.stdout)
    assert done.returncode == 0 and (got["source"], got["note"], got["driver"], got["cuda"]) == (
        "nvml", None, "550.54.15", "12.4",
    )  # fmt: skip
    assert [g["mig"] for g in got["gpus"]] == [False, True] and got["topology"]["gpus"] == ["GPU0", "GPU1"]
    assert got["samples_taken"] >= 4  # the first round at the start, the last at the child's exit
    busy, mig = got["summary"]
    assert busy["util_mean"] == 87.0 and busy["energy_source"] == "counter" and mig["util_mean"] is None
    assert [s["gpu"] for s in got["series"]] == [0, 1] and got["series"][1]["gpu_util"][0] is None


def test_the_profile_covers_the_gpus_the_task_was_given_only(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake NVML (four A10Gs, as on a host where nothing hid the others) on PYTHONPATH as ``pynvml``;
    the entrypoint, shipped as the container gets it, is real; the task is given GPUs 2 and 3."""
    fake = FakeNvml(
        [FakeGpu(uuid=f"GPU-{i}a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", pci=f"0000:{7 + i:02X}:00.0") for i in range(4)]
    )
    env = {**machine, **install(tmp_path / "driver", fake), "CUDA_VISIBLE_DEVICES": "2,3"}
    got = profile(run(["true"], env).stdout)
    assert got["source"] == "nvml" and got["note"] is None
    assert [s["gpu"] for s in got["summary"]] == [2, 3] and [g["index"] for g in got["gpus"]] == [2, 3]
    assert [s["gpu"] for s in got["series"]] == [2, 3] and got["topology"]["gpus"] == ["GPU2", "GPU3"]


def test_nvidia_smi_profiles_the_run_where_nvml_is_absent(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake ``nvidia-smi`` on PATH (one A100), driver-less fake NVML on PYTHONPATH: auto falls back to it."""
    fake_nvidia_smi.install(tmp_path / "smi", [fake_nvidia_smi.gpu(0)])
    env = {**machine, "PATH": f"{tmp_path / 'smi'}{os.pathsep}{machine['PATH']}"}
    done = run(["sh", "-c", "echo trained"], env)
    got = profile(done.stdout)
    assert done.returncode == 0 and done.stdout.startswith("trained\n")
    assert (got["source"], got["note"], got["driver"], got["cuda"]) == ("nvidia-smi", None, "550.54.15", "12.4")
    assert got["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB" and got["summary"][0]["util_mean"] == 87.0
    assert got["samples_taken"] >= 1 and got["series"][0]["fb_used"][0] == 61234
    ours = str(tmp_path / "smi")  # this test's fake: another test's may run beside it (xdist)
    assert not any(p.name.isdigit() and ours in cmdline(p) for p in Path("/proc").iterdir())


def test_an_unusual_pynvml_says_so_in_one_line_and_nvidia_smi_takes_over(
    machine: dict[str, str], tmp_path: Path
) -> None:
    """A ``pynvml`` on PYTHONPATH that is not nvidia-ml-py's (no ``NVMLError``: an old shim, a stub
    of a user's own) and a fake ``nvidia-smi`` on PATH: one line says what to fix, nvidia-smi samples."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text("def nvmlInit():\n    pass\n")
    fake_nvidia_smi.install(tmp_path / "smi", [fake_nvidia_smi.gpu(0)])
    env = {**machine, "PYTHONPATH": str(shim), "PATH": f"{tmp_path / 'smi'}{os.pathsep}{machine['PATH']}"}
    done = run(["sh", "-c", "echo trained"], env)
    got = profile(done.stdout)
    said = [line for line in done.stderr.splitlines() if line.startswith("airflow-gpu")]
    assert done.returncode == 0 and got["source"] == "nvidia-smi" and got["summary"][0]["util_mean"] == 87.0
    assert len(said) == 1 and f"pynvml module at {shim / 'pynvml.py'} is not nvidia-ml-py's" in said[0], said
    assert "AttributeError" not in done.stderr and "is not nvidia-ml-py's" in got["note"]


def cmdline(process: Path) -> str:
    try:
        return (process / "cmdline").read_text()
    except OSError:
        return ""


def test_an_image_without_python3_runs_the_command_unprofiled(tmp_path: Path) -> None:
    """No fake needed: PATH has no python3 at all; the command runs as is, after one line on stderr."""
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        wrap(["/bin/sh", "-c", "echo unprofiled; exit 5"]), env={"PATH": str(empty)}, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (5, "unprofiled\n", NO_PYTHON + "\n")


def interpreter(version: str) -> str | None:
    """A ``python<version>`` on this machine (PATH, or pyenv's), for the oldest Pythons an image may have;
    one that says it is that version (a pyenv shim on PATH may run another)."""
    candidates = [
        shutil.which(f"python{version}"),
        *Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python{version}"),
    ]
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for candidate in filter(None, candidates):
        said = subprocess.run(
            [str(candidate), "-c", probe], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
        )
        if said.returncode == 0 and said.stdout.strip() == version:
            return str(candidate)
    return None


@pytest.mark.parametrize("version", ["3.8", "3.7"])
def test_the_oldest_python3_profiles_and_an_older_one_falls_back(
    machine: dict[str, str], tmp_path: Path, version: str
) -> None:
    """No GPU (fake driver-less NVML on PYTHONPATH). The image's ``python3`` is 3.8 (the shipped modules
    must run there) or 3.7 (too old: the command runs unprofiled)."""
    found = interpreter(version)
    if found is None:
        pytest.skip(f"no Python {version} on this machine")
    old = tmp_path / f"py{version}"
    old.mkdir()
    (old / "python3").symlink_to(found)
    done = run(["sh", "-c", "echo hello; exit 4"], {**machine, "PATH": f"{old}{os.pathsep}/usr/bin{os.pathsep}/bin"})
    assert done.returncode == 4 and done.stdout.startswith("hello\n")
    if version == "3.8":
        assert profile(done.stdout)["exit_code"] == 4 and "Traceback" not in done.stderr
    else:
        assert PROFILE_MARKER not in done.stdout and done.stderr == NO_PYTHON + "\n"


def test_the_profiler_named_in_the_environment_is_used(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake NVML with a GPU on PYTHONPATH and a fake ``nvidia-smi`` on PATH: both would work, the
    environment picks; an unknown name is a note and auto."""
    fake_nvidia_smi.install(tmp_path / "smi", [fake_nvidia_smi.gpu(0)])
    env = {
        **machine, **install(tmp_path / "driver", FakeNvml([FakeGpu()])),
        "PATH": f"{tmp_path / 'smi'}{os.pathsep}{machine['PATH']}",
    }  # fmt: skip
    assert profile(run(["true"], {**env, "AIRFLOW_GPU_PROFILER": "nvidia-smi"}).stdout)["source"] == "nvidia-smi"
    assert profile(run(["true"], {**env, "AIRFLOW_GPU_PROFILER": "NVML"}).stdout)["source"] == "nvml"
    got = profile(run(["true"], {**env, "AIRFLOW_GPU_PROFILER": "dcgm", "AIRFLOW_GPU_PROFILE_INTERVAL": "-1"}).stdout)
    assert got["source"] == "nvml" and got["interval"] == 1.0  # wrap()'s default interval
    assert got["note"] == (
        "AIRFLOW_GPU_PROFILE_INTERVAL='-1' is not a positive number of seconds; used 1.0; "
        "unknown AIRFLOW_GPU_PROFILER='dcgm', used auto"
    )


class BrokenSampler:
    """A sampler whose readings cannot be had: what ``finish`` does when building the profile fails."""

    source, note = "nvml", None

    def samples(self) -> list[Any]:
        raise RuntimeError("the readings are gone")


def test_a_profile_that_cannot_be_built_is_a_note_in_an_empty_one(capsys: pytest.CaptureFixture[str]) -> None:
    """In process, no hardware at all: ``finish`` with a sampler that fails."""
    finish(
        BrokenSampler(),  # type: ignore[arg-type]
        [], interval=1.0, started=0.0, ended=1.0, code=3, signals=[], spot_notice="2026-11-23T15:00:00Z",
    )  # fmt: skip
    got = profile(capsys.readouterr().out)
    assert (got["source"], got["exit_code"], got["spot_notice"]) == ("none", 3, None)
    assert got["note"] == "the profile could not be built: RuntimeError: the readings are gone"
    assert exit_code(-15) == 143 and exit_code(0) == 0


def test_a_driver_that_hangs_does_not_keep_the_container_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU off the bus: ``nvmlInit`` never returns (a fake ``pynvml`` whose init blocks). The
    command's end still ends the entrypoint, with its exit code, once the start budget is spent."""
    from airflow_gpu.profiling import entrypoint

    never = threading.Event()
    hung = FakeNvml([FakeGpu()])
    hung.nvmlInit = lambda: never.wait()  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", hung)
    monkeypatch.setattr(entrypoint, "START_BUDGET_SECONDS", 0.5)
    monkeypatch.setenv("AIRFLOW_GPU_PROFILER", "nvml")
    monkeypatch.setenv("AIRFLOW_GPU_IMDS", "off")
    try:
        code = entrypoint.main(["sh", "-c", "exit 3"], interval=0.05)
    finally:
        never.set()  # the driver comes back: the late start must stop what it started, quietly
    starters = [t for t in threading.enumerate() if t.name == "airflow-gpu-profiler-start"]
    for starter in starters:
        starter.join(10)
    assert code == 3 and not any(t.is_alive() for t in starters)
    assert not [t for t in threading.enumerate() if t.name == "airflow-gpu-nvml-sampler"]  # stopped, not left
    out, err = capsys.readouterr()
    got = profile(out)
    assert got["exit_code"] == 3 and "did not start within 0.5 s" in (got["note"] or "")
    assert err == ""  # nothing logged after the command ended


def test_the_result_and_the_end_go_to_the_termination_message_and_the_output_is_unchanged(
    machine: dict[str, str], tmp_path: Path
) -> None:
    """Fake driver-less NVML, no nvidia-smi. The kubelet's file exists (here a temporary one): the command's
    standard output is passed on byte for byte (a line without its newline, a long line), its last result
    line and its exit go to the file when it exits 0, and the profile still ends the log."""
    end_file = tmp_path / "termination-log"
    end_file.write_text("")
    long = "z" * 100_000
    script = (
        "echo first; echo '::airflow-gpu-result::{\"step\": 1}'; echo err >&2; "
        f"echo '::airflow-gpu-result::{{\"loss\": 0.5}}'; echo {long}; printf 'no newline'"
    )
    done = run(["sh", "-c", script], {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)})
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[:5] == ["first", '::airflow-gpu-result::{"step": 1}', '::airflow-gpu-result::{"loss": 0.5}', long,
                         "no newline"]  # fmt: skip
    assert all(line.startswith(PROFILE_MARKER) for line in lines[5:]) and profile(done.stdout)["exit_code"] == 0
    assert read(end_file.read_text()) == (
        '::airflow-gpu-result::{"loss": 0.5}', {"exit_code": 0, "signals": [], "spot_notice": None, "result": "kept"},
    )  # fmt: skip
    failed = run(["sh", "-c", f"{script}; exit 3"], {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)})
    assert failed.returncode == 3 and failed.stdout.splitlines()[:5] == lines[:5]
    assert end_file.read_text().count("::airflow-gpu-end::") == 1  # a failure writes nothing: the kubelet's
    # ``FallbackToLogsOnError`` then gives the log's end, as without the profiler


def test_a_signalled_command_s_end_says_so_in_the_termination_message(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake driver-less NVML. A SIGTERM (a deletion while the pod runs) that the workload turns into exit 0
    is in the end line: whoever reads the message does not take it for a finished workload."""
    end_file = tmp_path / "termination-log"
    end_file.write_text("")
    env = {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)}
    process = subprocess.Popen(wrap([sys.executable, "-c", TRAP]), env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 0
    assert read(end_file.read_text()) == (
        None, {"exit_code": 0, "signals": ["SIGTERM"], "spot_notice": None, "result": "none"},
    )  # fmt: skip


def test_without_the_kubelet_s_file_the_output_is_not_piped(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake driver-less NVML. No file at the path (AWS Batch, a plain host): the command keeps the entrypoint's
    own standard output (a terminal stays a terminal), and nothing is made at the path."""
    absent = tmp_path / "absent"
    script = "import os, sys; print(os.readlink('/proc/self/fd/1') == os.readlink(f'/proc/{os.getppid()}/fd/1'))"
    done = run([sys.executable, "-c", script], {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(absent)})
    assert done.stdout.splitlines()[0] == "True" and not absent.exists()
    end_file = tmp_path / "termination-log"
    end_file.write_text("")
    done = run([sys.executable, "-c", script], {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)})
    assert done.stdout.splitlines()[0] == "False"  # the pipe: the mutation check of the line above


def test_output_still_held_open_at_the_end_leaves_the_result_unknown(machine: dict[str, str], tmp_path: Path) -> None:
    """Fake driver-less NVML. A process the command left behind holds its standard output open: the profiler
    stops waiting for it after ``DRAIN_SECONDS`` and cannot tell which result line was last, so it says so
    instead of passing an earlier one on as the result."""
    end_file = tmp_path / "termination-log"
    end_file.write_text("")
    script = "sleep 2.5 & printf '::airflow-gpu-result::1'"
    done = run(["sh", "-c", script], {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)})
    assert done.returncode == 0 and "::airflow-gpu-result::1" in done.stdout
    assert read(end_file.read_text()) == (
        None, {"exit_code": 0, "signals": [], "spot_notice": None, "result": "unknown"},
    )  # fmt: skip


def test_a_signal_that_comes_after_the_workload_exited_is_not_the_workload_s(
    machine: dict[str, str], tmp_path: Path
) -> None:
    """The sixth soak: a drain's SIGTERM reached the entrypoint once every process of the finished workload had
    ended, while the entrypoint was still finishing; its end listed the signal, and the pod, which had exited
    0 on its own, was taken for one stopped by the drain. The workload's shell exits at once; a process in a
    session of its own (not the command's group, so no signal reaches it) keeps the log open for 3 s, the
    window in which the test sends the SIGTERM. No fake: a real process, a real signal."""
    end_file = tmp_path / "termination-log"
    end_file.write_text("")
    env = {**machine, "AIRFLOW_GPU_TERMINATION_LOG": str(end_file)}
    shell, away = tmp_path / "shell", tmp_path / "away"
    # The lingering process says it left only once it has (setsid ran): a SIGTERM sent while it was still in the
    # command's group reached it, rightly counted, and failed the test on a loaded machine.
    linger = f"setsid sh -c 'echo $$ > {away}; exec sleep 3' &"
    script = f"echo '::airflow-gpu-result::{{\"loss\": 1}}'; echo $$ > {shell}; echo ready; {linger}"
    process = subprocess.Popen(wrap(["sh", "-c", script]), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().startswith("::airflow-gpu-result::")
        assert process.stdout.readline() == "ready\n"
        wait_until(lambda: away.exists() and away.read_text().strip(), "the lingering process in its own session")
        wait_until(lambda: not Path(f"/proc/{shell.read_text().strip()}").exists(), "the shell reaped")
        process.terminate()
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0
    assert profile(out)["signals"] == []
    end = [line for line in end_file.read_text().splitlines() if line.startswith("::airflow-gpu-end::")]
    assert end and json.loads(end[-1].split("::", 2)[2])["signals"] == []

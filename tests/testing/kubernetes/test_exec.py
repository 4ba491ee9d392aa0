"""``pods/exec`` through the unmodified client's WebSocket stream, as ``kubectl exec`` and KPO use it.

Expected shapes: the client's ``WSClient`` (stdout on channel 1, stderr on 2, ``returncode`` from
the Status on channel 3: ``details.causes[0].message``) and the API server's 400 answers.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.stream import stream

from airflow_gpu.testing.kubernetes import volumes
from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for

pytestmark = pytest.mark.skipif(not volumes.namespaces_available(), reason="needs mount/PID namespaces (root)")

WAIT = ["sh", "-c", "trap 'exit 0' TERM; sleep 60 & wait"]


def _running(core: client.CoreV1Api, name: str, **spec: object) -> None:
    core.create_namespaced_pod("default", pod_manifest(name, WAIT, **spec))
    wait_for(phase_is(core, name, "Running"))


def test_exec_returns_stdout_stderr_and_the_exit_code(core: client.CoreV1Api) -> None:
    _running(core, "execd", container={"env": [{"name": "GREETING", "value": "hi"}]})
    response = stream(
        core.connect_get_namespaced_pod_exec,
        "execd",
        "default",
        command=["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    response.run_forever(timeout=10)
    assert response.read_stdout() == "hi\n"
    assert response.read_stderr() == "oops\n"
    assert response.returncode == 3


def test_exec_preloaded_output_and_success(core: client.CoreV1Api) -> None:
    _running(core, "quiet")
    assert (
        stream(
            core.connect_get_namespaced_pod_exec,
            "quiet",
            "default",
            command=["echo", "done"],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        )
        == "done\n"
    )


def test_exec_runs_in_the_containers_namespaces(core: client.CoreV1Api) -> None:
    _running(
        core,
        "inside",
        container={"volumeMounts": [{"name": "v", "mountPath": "/emulated/inside"}]},
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    response = stream(
        core.connect_get_namespaced_pod_exec,
        "inside",
        "default",
        command=[
            "sh",
            "-c",
            "touch /emulated/inside/seen && ls /emulated/inside && "
            "cat /proc/1/cmdline | tr '\\0' ' '; echo; ps -e -o pid= | wc -l",
        ],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    response.run_forever(timeout=10)
    seen, init, processes = response.read_stdout().splitlines()[:3]
    assert seen == "seen"
    assert "container_init.py" in init and "sleep 60" in init  # PID 1: the container's init, running its command
    assert 4 <= int(processes) <= 8  # its PID namespace: init, sh, sleep, and the exec's sh, ps and wc


def test_exec_reads_stdin(core: client.CoreV1Api) -> None:
    _running(core, "stdin")
    response = stream(
        core.connect_get_namespaced_pod_exec,
        "stdin",
        "default",
        command=["/bin/sh"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    response.write_stdin("echo from-stdin; exit 0\n")
    response.run_forever(timeout=10)
    assert response.read_stdout() == "from-stdin\n"
    assert response.returncode == 0


def _refusal(core: client.CoreV1Api, path: str) -> tuple[int, dict[str, object]]:
    """The answer before the upgrade (the client itself only surfaces it as a handshake error)."""
    url = f"{core.api_client.configuration.host}/api/v1/namespaces/default/pods/{path}"
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(url, timeout=10)
    return raised.value.code, json.loads(raised.value.read())


def test_exec_errors(core: client.CoreV1Api) -> None:
    _running(core, "errors")
    code, status = _refusal(core, "errors/exec?command=true&container=nope&stdout=true")
    assert (code, status["reason"], status["message"]) == (
        400,
        "BadRequest",
        "container nope is not valid for pod errors",
    )
    code, status = _refusal(core, "absent/exec?command=true&stdout=true")
    assert (code, status["reason"], status["message"]) == (404, "NotFound", 'pods "absent" not found')
    code, status = _refusal(core, "errors/exec?stdout=true")
    assert (code, status["message"]) == (400, "you must specify at least 1 command")


def test_exec_starts_where_the_container_runs(core: client.CoreV1Api) -> None:
    """Exec starts in the container's working directory as the container sees it (``nsenter --wd``
    would open the host's path: a WORKDIR the host lacks failed every exec, exit code and all)."""
    workdir = {"workingDir": "/emulated-no-such-dir"}
    manifest = pod_manifest("workdir", ["sh", "-c", "pwd; " + WAIT[2]], container=workdir)
    core.create_namespaced_pod("default", manifest)
    wait_for(phase_is(core, "workdir", "Running"))
    log = lambda: core.read_namespaced_pod_log("workdir", "default", _preload_content=False).data  # noqa: E731
    where = wait_for(lambda: log().decode().strip() or None)
    out = stream(
        core.connect_get_namespaced_pod_exec, "workdir", "default", command=["sh", "-c", "pwd; exit 3"],
        stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False,
    )  # fmt: skip
    out.run_forever(timeout=10)
    assert (out.read_stdout().strip(), out.returncode) == (where, 3)


def test_a_container_and_an_exec_start_with_no_signal_ignored(core: client.CoreV1Api) -> None:
    """As a container runtime starts them, whatever the process running the emulator ignores. A test
    runner in a background job (or an xdist worker) ignores SIGINT; inherited, that made a shell skip
    its ``trap ... INT`` silently (POSIX: a signal ignored on entry cannot be trapped), so KPO's
    ``kill -2`` never ended its xcom sidecar and the task hung."""
    script = "grep SigIgn /proc/$$/status; trap 'exit 0' INT; echo ready; while true; do sleep 0.1; done"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        core.create_namespaced_pod("default", pod_manifest("trapped", ["sh", "-c", script]))
        wait_for(phase_is(core, "trapped", "Running"))
        wait_for(lambda: "ready" in core.read_namespaced_pod_log("trapped", "default"))
        said = stream(
            core.connect_get_namespaced_pod_exec,
            "trapped",
            "default",
            command=["sh", "-c", "grep SigIgn /proc/$$/status; kill -2 1"],  # PID 1 passes it on
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    wait_for(phase_is(core, "trapped", "Succeeded"))  # the trap ran: exit 0
    log = core.read_namespaced_pod_log("trapped", "default", _preload_content=False).data.decode()
    assert ignored(said) == ignored(log) == []


def ignored(status_lines: str) -> list[int]:
    """The standard signals (1-31) a ``/proc/<pid>/status`` says are ignored; glibc keeps its own
    real-time ones (32, 33) to itself."""
    mask = int(next(line for line in status_lines.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    return [number for number in range(1, 32) if mask >> (number - 1) & 1]

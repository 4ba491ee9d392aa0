"""``pods/exec``: a command in a running container, over the WebSocket channel protocol.

The kubernetes python client (``kubernetes.stream.stream(api.connect_get_namespaced_pod_exec, ...)``)
asks for ``v5.channel.k8s.io`` then ``v4.channel.k8s.io``. Each binary message is one channel
byte then data: 0 stdin, 1 stdout, 2 stderr, 3 the final Status (JSON); v5 adds 255, "close
channel N" (the client closes stdin that way). The Status is what the kubelet's
``remotecommand`` writes: ``{"status": "Success"}``, or ``Failure`` with reason
``NonZeroExitCode`` and the exit code as the message of a cause of reason ``ExitCode``
(``kubernetes/pkg/kubelet/cri/streaming/remotecommand/httpstream.go`` ``writeStatus``;
the client reads ``details.causes[0].message``).

The command runs in the container's mount and PID namespaces (``nsenter`` into its PID 1, the
init of ``container_init.py``) with the container's environment, as a runtime's exec does. An
exec that cannot be served answers before the upgrade, with the API server's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from airflow_gpu.testing.kubernetes.kubelet import default_signals
from airflow_gpu.testing.kubernetes.objects import ApiError, bad_request

if TYPE_CHECKING:
    from airflow_gpu.testing.kubernetes.cluster_state import ClusterState
    from airflow_gpu.testing.kubernetes.kubelet import ContainerRun

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


def _target(state: ClusterState, namespace: str, name: str, query: Any) -> tuple[ContainerRun, int, str]:
    """(the container, the host PID of its PID 1, its working directory) or the API's error."""
    pod = state.store.get("pods", namespace, name)
    names = [c["name"] for c in pod["spec"]["containers"]]
    container = query.get("container")
    if not container:
        if len(names) != 1:
            raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
        container = names[0]
    if container not in names:
        raise bad_request(f"container {container} is not valid for pod {name}")
    phase = pod["status"].get("phase")
    if phase in ("Succeeded", "Failed"):
        raise bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
    run = state.runs.get((namespace, name))
    target = run.containers[container] if run is not None else None
    pid = target.namespace_pid() if target is not None else None
    if run is not None and run.volumes is None and not run.simulated:  # a host process: exec would reach the host
        raise bad_request("unable to upgrade connection: this machine gives containers no namespaces to exec into")
    if run is None or target is None or pid is None:
        raise bad_request(f'unable to upgrade connection: container not found ("{container}")')
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    try:  # where the container's PID 1 actually is: its workingDir, or where the kubelet put it instead
        workdir = str(Path(f"/proc/{pid}/cwd").readlink())
    except OSError:
        workdir = spec.get("workingDir") or run.workdir
    return target, pid, workdir


def _status(code: int, command: list[str]) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command {command!r}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


async def pod_exec(request: web.Request, state: ClusterState) -> web.StreamResponse:
    """``GET|POST /api/v1/namespaces/{namespace}/pods/{name}/exec?command=...&stdin=...``."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    command = request.query.getall("command", [])
    if not command:
        raise bad_request("you must specify at least 1 command")
    target, pid, workdir = _target(state, namespace, name, request.query)
    wants = {key: request.query.get(key, "false").lower() in ("true", "1") for key in ("stdin", "stdout", "stderr")}
    socket = web.WebSocketResponse(protocols=PROTOCOLS)
    if not socket.can_prepare(request).ok:
        raise ApiError(400, "BadRequest", "Upgrade request required")
    await socket.prepare(request)
    pipe = asyncio.subprocess.PIPE
    try:
        process = await asyncio.create_subprocess_exec(
            # --wdns: the working directory as the container sees it (--wd would open the host's path).
            *default_signals(),  # as the runtime starts an exec'd process: no signal ignored
            *["nsenter", f"--target={pid}", "--mount", "--pid", f"--wdns={workdir}", "--", *command],
            stdin=pipe if wants["stdin"] else asyncio.subprocess.DEVNULL,
            stdout=pipe,
            stderr=pipe,
            env=target.env,
        )
    except OSError as error:
        await socket.send_bytes(bytes([ERROR]) + json.dumps(_status(126, command) | {"message": str(error)}).encode())
        await socket.close()
        return socket

    async def pump(stream: asyncio.StreamReader | None, channel: int, send: bool) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            if send:
                await socket.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for message in socket:
            if message.type == WSMsgType.TEXT:  # the python client sends str data as text frames
                payload = message.data.encode()
            elif message.type == WSMsgType.BINARY:
                payload = message.data
            else:
                continue
            if not payload:
                continue
            channel, data = payload[0], payload[1:]
            if channel == STDIN and process.stdin is not None and data:
                process.stdin.write(data)
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    await process.stdin.drain()
            elif channel == CLOSE and data[:1] == bytes([STDIN]) and process.stdin is not None:
                process.stdin.close()
        if process.stdin is not None:  # the client went away: so does the command's stdin
            process.stdin.close()

    feeder = asyncio.get_running_loop().create_task(feed())
    try:
        await asyncio.gather(
            pump(process.stdout, STDOUT, wants["stdout"]), pump(process.stderr, STDERR, wants["stderr"])
        )
        code = await process.wait()
        code = 128 - code if code < 0 else code
        with contextlib.suppress(ConnectionResetError):
            await socket.send_bytes(bytes([ERROR]) + json.dumps(_status(code, command)).encode())
            await socket.close()
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await feeder
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    return socket

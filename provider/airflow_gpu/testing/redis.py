"""A throwaway Redis server for a local CeleryExecutor: its own port, folder and process, nothing kept.

Users run CeleryExecutor with Redis as its broker; the soak does too (``make soak``), so that
what it proves about the provider holds with Celery's queues, acknowledgements and worker
restarts in the path. The server is Debian's ``redis-server`` (``tools/system-packages.txt``)
started with a command-line configuration: no RDB snapshots and no append-only file (a restart
loses the queue, as a broker restart without persistence does in production), on 127.0.0.1 only.
Redis, unlike PostgreSQL, runs as root without complaint.

``restart()`` stops the server hard (SIGKILL) and starts it again on the same port: the soak's
"Redis restart" fault, after which Celery workers reconnect and the scheduler re-sends what its
queue lost (Airflow's ``[scheduler] task_queued_timeout``).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

from airflow_gpu.testing.polling import wait_for


class RedisServer:
    """``with RedisServer(folder) as server: server.url``: database 0 of a fresh server."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        from airflow_gpu.testing.airflow_stack import free_port

        self.folder = folder.resolve()
        self.port = port or free_port()
        program = shutil.which("redis-server")
        if program is None:
            raise RuntimeError("redis-server was not found on PATH: install the Debian package redis-server")
        self.program = program
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        return [
            self.program,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.folder),
            "--save", "",  # no RDB snapshots
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = 30) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_for(self._answers, timeout, f"redis-server on port {self.port}", interval=0.1)
        except TimeoutError:
            self.stop()
            log = self.folder / "redis.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"redis-server did not answer: {tail}") from None
        return self

    def stop(self) -> None:
        """SIGKILL: nothing is kept, so nothing needs flushing."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        self.process = None

    def restart(self, down_seconds: float = 0.5) -> None:
        """Kill the server and start a fresh, empty one on the same port after ``down_seconds``."""
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

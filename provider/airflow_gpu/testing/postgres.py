"""A throwaway PostgreSQL server for a local Airflow: its own data directory, port and process.

SQLite takes one writer at a time. A real Airflow with a dozen task processes, a scheduler, a
triggerer and an api-server writing at once meets "database is locked" after SQLite's 5 s busy
timeout, and Airflow does not survive every such answer: the scheduler exits on one in its
critical section, and an execution-API read can come back as a bare 404. Users run PostgreSQL;
the end-to-end stack does too, so what it proves holds on the database users have.

The server is Debian's ``postgresql`` package (``tools/system-packages.txt``), run from its
version directory (``/usr/lib/postgresql/<N>/bin``, not on ``PATH``). PostgreSQL refuses to run as
root: as root the data directory is given to the ``postgres`` system user the package creates and
the server runs as that user (``runuser``, util-linux), from a directory of its own in the system's
temporary directory, removed when the server stops (its log is copied into the folder given). Not
inside the folder given: that user would need to traverse every directory above it, and pytest
takes that away from its own (``/tmp/pytest-of-<user>`` goes back to mode 0700 whenever another pytest
starts, as the CI how-to's test does beside the soak's slice): the server then found its data directory
gone ("could not stat data directory: Permission denied") and shut down mid-run. Durability is off
(``fsync``, ``synchronous_commit``, ``full_page_writes``): the data lives for one test session.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Where Debian's ``postgresql`` package puts each major version's programs.
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
#: The system user Debian's package creates; the server runs as it when we are root.
SERVER_USER = "postgres"
#: Settings for a session-long scratch database: no durability, room for every Airflow part (each with a sync
#: and an async engine, each pool up to 30 in the end-to-end stack).
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
}


def server_bin_dir() -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl``: on ``PATH``, else Debian's newest version directory."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    versions = Path("/").glob(DEBIAN_BIN_GLOB.lstrip("/"))
    found = [p for p in versions if (p / "initdb").exists() and (p / "pg_ctl").exists()]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


def _reachable_temp() -> str:
    """The system's temporary directory if every directory down to it lets others through (the server's user
    must reach its own directory), else ``/tmp``: a root whose ``TMPDIR`` is under ``/root`` would hide it."""
    base = Path(tempfile.gettempdir()).resolve()
    if all(path.stat().st_mode & 0o001 for path in (base, *base.parents)):
        return str(base)
    return "/tmp"


class PostgresServer:
    """``with PostgresServer(folder) as server: server.url``: the cluster's ``postgres`` database, owned
    by the superuser ``airflow`` and trusted over 127.0.0.1, for SQLAlchemy's psycopg2 driver (Airflow
    adds asyncpg for its async sessions)."""

    database = "postgres"  # initdb's own: no createdb needed
    user = "airflow"

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = folder.resolve()
        self.data = self.folder / "data"
        from airflow_gpu.testing.airflow_stack import free_port

        self.port = port or free_port()
        bin_dir = server_bin_dir()
        if bin_dir is None:
            raise RuntimeError(
                "PostgreSQL's initdb and pg_ctl were not found (on PATH or in /usr/lib/postgresql/*/bin): "
                "install the Debian package postgresql"
            )
        self.bin_dir = bin_dir
        self._as: list[str] = []
        self.home = self.folder  # where the server's data, socket and log live (its own directory as root)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, program: str, *args: str) -> None:
        command = [*self._as, str(self.bin_dir / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.home)
        if done.returncode != 0:
            log = self.home / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()[-2000:]}\n{tail}")

    def start(self) -> PostgresServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # "root" execution of the PostgreSQL server is not permitted
            owner = pwd.getpwnam(SERVER_USER)
            # its own directory, out of pytest's (the module's docstring says why)
            self.home = Path(tempfile.mkdtemp(prefix="airflow-gpu-postgres-", dir=_reachable_temp()))
            self.home.chmod(0o700)
            os.chown(self.home, owner.pw_uid, owner.pw_gid)
            self.data = self.home / "data"
            self._as = ["runuser", "-u", SERVER_USER, "--"]
        try:
            self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-sync")
            options = " ".join([f"-p {self.port}", f"-k {self.home}", *(f"-c {k}={v}" for k, v in SETTINGS.items())])
            self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.home / "server.log"), "-w", "start")
        except BaseException:
            self.stop()  # ``with`` calls no __exit__ for a failed __enter__: nothing is left behind
            raise
        return self

    def stop(self) -> None:
        """Immediate shutdown: the data is thrown away with the folder."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        if self.home != self.folder:
            with contextlib.suppress(OSError):
                shutil.copyfile(self.home / "server.log", self.folder / "server.log")
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

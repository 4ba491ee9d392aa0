"""The throwaway PostgreSQL the end-to-end Airflow runs on (``airflow_gpu.testing.postgres``): Debian's
real server, started and stopped as the stack does, reached through the driver Airflow uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_gpu.testing.polling import wait_for
from airflow_gpu.testing.postgres import PostgresServer, server_bin_dir

pytestmark = pytest.mark.skipif(server_bin_dir() is None, reason="make test installs postgresql")


def test_a_server_takes_writes_from_two_connections_and_leaves_no_process(tmp_path: Path) -> None:
    import psycopg2
    from sqlalchemy import create_engine, text

    with PostgresServer(tmp_path / "pg") as server:
        engine = create_engine(server.url)
        with engine.begin() as one:
            one.execute(text("CREATE TABLE t (n int)"))
            one.execute(text("INSERT INTO t VALUES (1)"))
        with engine.connect() as reader, engine.begin() as writer:
            reader.execute(text("BEGIN"))
            reader.execute(text("SELECT count(*) FROM t")).scalar_one()
            writer.execute(text("INSERT INTO t VALUES (2)"))  # never "database is locked" behind a reader
        with engine.connect() as check:
            assert check.execute(text("SELECT sum(n) FROM t")).scalar_one() == 3
            assert check.execute(text("SHOW fsync")).scalar_one() == "off"
        engine.dispose()
        pid = int((server.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)  # running
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "the server process to be gone")  # init reaps it
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(host="127.0.0.1", port=server.port, user=server.user, connect_timeout=2)


def test_a_missing_server_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_gpu.testing.postgres as postgres

    monkeypatch.setattr(postgres, "server_bin_dir", lambda: None)
    with pytest.raises(RuntimeError, match="install the Debian package postgresql"):
        PostgresServer(tmp_path)


@pytest.mark.slow  # a second server start: make test-quick keeps the one above
@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as its own user only when started by root")
def test_the_server_user_keeps_its_data_when_a_folder_above_it_closes(tmp_path: Path) -> None:
    """Another pytest starting (the CI how-to's test does, beside the soak's slice) sets ``/tmp/pytest-of-root``
    back to mode 0700: a data directory under it was gone for the ``postgres`` user, and the server shut down
    at its next check ("could not stat data directory"). What the server user can reach is asked here as it
    asks it, after the same chmod; the server's own directory is gone with it at the end, its log kept."""
    import subprocess

    from airflow_gpu.testing.postgres import SERVER_USER

    above = tmp_path / "pytest-of-root"
    with PostgresServer(above / "pg") as server:
        above.chmod(0o700)
        as_server = ["runuser", "-u", SERVER_USER, "--"]
        stat = subprocess.run([*as_server, "stat", str(server.data / "PG_VERSION")], check=False)
        assert stat.returncode == 0
        home = server.home
    assert not home.exists() and (above / "pg" / "server.log").is_file()

"""The throwaway Redis the soak's CeleryExecutor uses as its broker (``airflow_gpu.testing.redis``):
Debian's real server, reached through the client Celery's transport uses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_gpu.testing.redis import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="make test installs redis-server")


def test_a_restart_empties_the_broker_on_the_same_port_and_stop_leaves_no_process(tmp_path: Path) -> None:
    import redis

    with RedisServer(tmp_path / "redis") as server:
        client = redis.Redis.from_url(server.url)
        client.lpush("celery", b"message")
        assert client.llen("celery") == 1
        port = server.port
        server.restart(down_seconds=0.1)
        assert server.port == port
        # No persistence: what the broker held before the restart is gone, as in production without AOF.
        assert redis.Redis.from_url(server.url).llen("celery") == 0
        assert list((tmp_path / "redis").glob("*.rdb")) == []
        process = server.process
        assert process is not None
    assert process.poll() is not None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()


def test_a_missing_server_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="install the Debian package redis-server"):
        RedisServer(tmp_path)

"""A client of ``weft_platform.redis_client`` outlives a Redis restart: every pooled
connection is dead after it, and none of them may fail a command (PostgreSQL's pools ping
before use; these must too). A Redis server of this test only, on a free port, so that the
shared one is never restarted."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from weft_platform.redis_client import redis_client
from weft_testkit.stack import free_port

POOLED = 20


class ThrowawayRedis:
    """A ``redis-server`` without persistence, started and killed by the test."""

    def __init__(self, port: int, folder: Path):
        self.port = port
        self._folder = folder
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            shutil.which("redis-server") or "redis-server", "--port", str(self.port),
            "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self._folder),
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, check=False
            ).stdout.strip()
            != b"PONG"
        ):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        assert self._process is not None
        self._process.kill()
        self._process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: deploy/local/bootstrap.sh installs it")
    running = ThrowawayRedis(free_port(), tmp_path)
    running.start()
    yield running
    running.kill()


async def _fill_pool(client: Redis) -> None:
    """``POOLED`` connections open at once, then all back in the pool."""
    await asyncio.gather(*(client.set(f"warm:{i}", i) for i in range(POOLED)))
    assert len(client.connection_pool._available_connections) >= POOLED


async def test_every_pooled_connection_survives_a_restart(server: ThrowawayRedis) -> None:
    client = redis_client(f"redis://127.0.0.1:{server.port}/0")
    try:
        await _fill_pool(client)
        server.kill()
        server.start()
        answers = await asyncio.gather(
            *(client.incr("counter") for _ in range(POOLED)), return_exceptions=True
        )
        failures = [a for a in answers if isinstance(a, BaseException)]
        assert not failures, failures
        # Each INCR ran exactly once: a dead connection's command never reached the server.
        assert int(await client.get("counter") or 0) == POOLED
    finally:
        await client.aclose()


async def test_an_idle_connection_is_checked_before_reuse(server: ThrowawayRedis) -> None:
    client = redis_client(f"redis://127.0.0.1:{server.port}/0", health_check_s=1)
    try:
        await _fill_pool(client)
        server.kill()
        server.start()
        # Idle past health_check_s, so the dead connection is found by a PING (resent on a
        # new connection) before the command is written; this test shows the client works
        # then, not which of the two paths (ping or resend) found the dead connection.
        await asyncio.sleep(1.1)
        assert await client.set("k", "v")
        assert await client.get("k") == b"v"
    finally:
        await client.aclose()

"""A private single-node Kafka for tests that stop the broker: its own WEFT_HOME (under
the test's tmp dir) and free ports, driven through ``deploy/local/infra.sh``, so the
shared broker other people use is never touched. Stopped again by the fixture."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from weft_testkit.stack import free_port

REPO = Path(__file__).resolve().parents[1]


@dataclass
class PrivateBroker:
    """One test's Kafka; ``down`` and ``up`` stop it (SIGTERM) and start it on its data."""

    home: Path
    port: int
    controller_port: int
    security: str | None = None
    """``WEFT_KAFKA_SECURITY`` of its format (sasl, plaintext); None: the environment's."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_env(self) -> dict[str, str]:
        """``WEFT_KAFKA_*`` of its super user (what infra.sh wrote at format; SASL unless
        ``WEFT_KAFKA_SECURITY=plaintext``), and where its other users' passwords are
        (``WEFT_KAFKA_USERS_FILE``, for the services of a stack on it)."""
        data = self.home / "data"
        pairs = (line.split("=", 1) for line in (data / "kafka-client.env").read_text().split())
        return {**dict(pairs), "WEFT_KAFKA_USERS_FILE": str(data / "kafka-users")}

    def infra(self, command: str) -> None:
        """``deploy/local/infra.sh COMMAND kafka`` on this broker."""
        env = {
            **os.environ,
            "WEFT_HOME": str(self.home),
            "WEFT_KAFKA_PORT": str(self.port),
            "WEFT_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            **({"WEFT_KAFKA_SECURITY": self.security} if self.security else {}),
        }
        subprocess.run(
            [str(REPO / "deploy/local/infra.sh"), command, "kafka"],
            env=env, check=True, timeout=180, capture_output=True,
        )  # fmt: skip

    async def up(self) -> None:
        """Start (or start again, on the same data) and wait until it answers."""
        await asyncio.to_thread(self.infra, "up")

    async def down(self) -> None:
        """SIGTERM the broker and wait for it to exit."""
        await asyncio.to_thread(self.infra, "down")


@pytest.fixture
async def private_broker(tmp_path: Path) -> AsyncIterator[PrivateBroker]:
    """A running private broker, stopped after the test."""
    broker = PrivateBroker(tmp_path / "weft-home", free_port(), free_port())
    await broker.up()
    try:
        yield broker
    finally:
        await broker.down()

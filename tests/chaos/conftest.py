"""Fixtures of the fault suite: a private Kafka broker and Redis server (the suite stops,
kills and wipes them, which the other suites' shared ones must never suffer) and one Weft
stack on them. PostgreSQL is the shared one: no fault here touches it.

Sizes come from the environment so that ``make test`` runs a reduced form and
``make test-full`` the full one (docs/operations.md, "What happens when X fails").
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from weft_testkit import LocalStack, StackConfig
from weft_testkit.kafka import CLIENT_KEYS
from weft_testkit.stack import free_port

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "deploy" / "local" / "infra.sh"
TOOL = "thinking"
TOOL_ARGUMENTS = {
    "thought": "chaos step",
    "next_thought_needed": True,
    "thought_number": 1,
    "total_thoughts": 2,
}
ANSWER = " ".join(f"word{i}" for i in range(36)) + " done."
CHUNK_DELAY_MS = 120
"""36 words, 3 a chunk, 120 ms apart: each answer streams for about 1.5 s, so a fault
lands while many answers are half-streamed."""
SCRIPT = {
    "fallback": "rounds",
    "rounds": 1,
    "parallel": 2,
    "rounds_tool": TOOL,
    "rounds_arguments": TOOL_ARGUMENTS,
    "rounds_answer": ANSWER,
    "rounds_chunk_delay_ms": CHUNK_DELAY_MS,
}
"""Every turn: one round of two parallel read-only tool calls, then a slow answer."""


def chaos_home() -> Path:
    """Where the suite keeps its private infra, its stack's logs and its results:
    ``WEFT_CHAOS_HOME``, else ``WEFT_HOME`` (two fault runs at once need two of them)."""
    home = os.environ.get("WEFT_CHAOS_HOME") or os.environ.get("WEFT_HOME")
    return Path(home) if home else REPO / ".weft"


@dataclass(frozen=True)
class PrivateInfra:
    """The suite's own Kafka and Redis, run by ``deploy/local/infra.sh`` under ``home``."""

    home: Path
    env: dict[str, str]

    def run(self, command: str, component: str, timeout_s: float = 240) -> None:
        """``infra.sh COMMAND COMPONENT`` against this infra (up waits until it serves)."""
        done = subprocess.run(
            [str(INFRA), command, component], env=self.env, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"infra.sh {command} {component}: {done.stderr[-2000:]}")

    def pid(self, component: str) -> int:
        """The running process of ``component`` (kafka, redis)."""
        return int((self.home / "run" / f"{component}.pid").read_text().strip())

    def wipe_redis_data(self) -> None:
        """Delete what Redis persisted, so that it restarts empty (persistence must not be
        what makes recovery work)."""
        data = self.home / "data" / "redis"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def private_infra(infra: dict[str, str]) -> Iterator[PrivateInfra]:
    """A Kafka broker and a Redis server of this suite only, on free ports; stopped and
    deleted afterwards (a formatted KRaft log remembers its controller port)."""
    home = chaos_home() / "chaos-infra"
    shutil.rmtree(home, ignore_errors=True)
    kafka, controller, redis = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "WEFT_HOME": str(home),
        "WEFT_KAFKA_PORT": str(kafka),
        "WEFT_KAFKA_CONTROLLER_PORT": str(controller),
        "WEFT_REDIS_PORT": str(redis),
    }
    private = PrivateInfra(home, env)
    kafka_keys = ("WEFT_KAFKA_BOOTSTRAP", *CLIENT_KEYS, "WEFT_KAFKA_USERS_FILE")
    saved = {k: os.environ.get(k) for k in (*kafka_keys, "WEFT_REDIS_URL")}
    try:
        private.run("up", "redis")
        private.run("up", "kafka")
        # LocalStack (topics, migrations, every service) reads these through infra_env():
        # the broker's address and logins (SASL unless WEFT_KAFKA_SECURITY=plaintext).
        for key in kafka_keys:
            os.environ.pop(key, None)
        data = home / "data"
        for line in (data / "kafka-client.env").read_text().split():
            name, _, setting = line.partition("=")
            os.environ[name] = setting
        os.environ["WEFT_KAFKA_USERS_FILE"] = str(data / "kafka-users")
        os.environ["WEFT_REDIS_URL"] = f"redis://127.0.0.1:{redis}/0"
        yield private
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for component in ("kafka", "redis"):
            try:
                private.run("down", component, timeout_s=120)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"[chaos] {component} not stopped cleanly: {exc}")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def chaos_stack(private_infra: PrivateInfra) -> Iterator[LocalStack]:
    """Two engine replicas and one of every other service on the private infra; short
    leases so that a dead replica's turns are taken over within seconds."""
    home = chaos_home()
    config = StackConfig(
        log_dir=home / "logs" / "chaos",
        replicas={"engine": 2},
        partitions=3,
        extra_env={
            "WEFT_LEASE_TTL_S": "3",
            "WEFT_MAX_CONCURRENT_TURNS": "200",  # the gateway's per-tenant cap (default 20)
        },
    )
    with LocalStack(config) as running:
        asyncio.run(_load_script(running))
        yield running


async def _load_script(stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm:
        response = await llm.post("/_script", json=SCRIPT)
        response.raise_for_status()


@pytest.fixture(scope="session")
def chaos_agent(chaos_stack: LocalStack) -> str:
    """A custom agent whose one tool is the read-only ``thinking`` tool."""

    async def create() -> str:
        async with chaos_stack.api_client() as api:
            body = {
                "name": "chaos",
                "mode": "smart-reasoning",
                "allowed_tools": [TOOL],
                "max_iterations": 6,
            }
            response = await api.post("/api/v1/agents", json=body)
            response.raise_for_status()
            return str(response.json()["id"])

    return asyncio.run(create())


@pytest.fixture
async def api(chaos_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with chaos_stack.api_client(timeout=30) as client:
        yield client

"""Shared fixtures: real infrastructure checks and the no-real-model guard."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlparse

import pytest
from redis.asyncio import Redis
from weft_testkit import infra_env

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# Services built in-process by tests generate the development credential keys (in
# $WEFT_HOME/credentials) instead of refusing to start without them.
os.environ.setdefault("WEFT_CREDENTIALS_DEV_KEYS", "true")

# The stack (e2e, security), database (integration, security) and private broker (outage
# tests) fixtures, shared by suites.
pytest_plugins = [
    "tests.stack_fixtures",
    "tests.db_fixtures",
    "tests.private_broker",
    "tests.security.admin_fixtures",
    "tests.parallel",
]


@pytest.fixture(autouse=True, scope="session")
def _forbid_real_model() -> Iterator[None]:
    """Tests talk to the scripted LLM test double only, never to a real provider."""
    base = os.environ.get("OPENAI_BASE_URL", "")
    if base and urlparse(base).hostname not in _LOOPBACK:
        pytest.fail(f"OPENAI_BASE_URL={base} is not loopback: tests never call a real model")
    os.environ.pop("OPENAI_BASE_URL", None)
    os.environ["OPENAI_API_KEY"] = "scripted-llm-test-double"
    yield


def _reachable(hostport: str) -> bool:
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def infra() -> dict[str, str]:
    """Connection settings of the real Kafka, PostgreSQL and Redis; fails when one is down."""
    env = infra_env()
    pg = urlparse(env["WEFT_DATABASE_URL"])
    redis = urlparse(env["WEFT_REDIS_URL"])
    targets = {
        "kafka": env["WEFT_KAFKA_BOOTSTRAP"],
        "postgres": f"{pg.hostname}:{pg.port}",
        "redis": f"{redis.hostname}:{redis.port}",
    }
    down = [name for name, hp in targets.items() if not _reachable(hp)]
    if down:
        pytest.fail(f"infrastructure not running: {down}; start it with `make infra-up`")
    return env


@pytest.fixture
async def redis(infra: dict[str, str]) -> AsyncIterator[Redis]:
    """A client of the real Redis, closed after the test."""
    client = Redis.from_url(infra["WEFT_REDIS_URL"])
    yield client
    await client.aclose()

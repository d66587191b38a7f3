"""A real Redis blip (a private redis-server this test stops and starts, never the shared
one): ``/readyz`` stays 200 ``degraded`` within ``WEFT_READINESS_GRACE_S`` while a route
that needs Redis answers 503 with Retry-After; past the grace (a fake clock, no waiting)
it is 503 ``not_ready``; when Redis is back, 200 ``ready`` again. Kafka and PostgreSQL
are the shared ones."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from weft_platform.app import create_service_app
from weft_platform.readiness import DependencyGrace, Readiness
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.settings import ServiceSettings
from weft_testkit.kafka import settings_fields
from weft_testkit.stack import free_port

pytestmark = pytest.mark.infra

GRACE_S = 30.0


@dataclass
class PrivateRedis:
    """A redis-server of this test only (no persistence), on a free port."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def down(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (make bootstrap installs it)")
    redis = PrivateRedis(port=free_port(), workdir=tmp_path)
    redis.up()
    yield redis
    redis.down()


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def runtime(
    infra: dict[str, str], private_redis: PrivateRedis
) -> AsyncIterator[ServiceRuntime]:
    fields: dict[str, Any] = {
        **settings_fields(infra),
        "database_url": infra["WEFT_DATABASE_URL"],
        "redis_url": f"redis://127.0.0.1:{private_redis.port}/0",
    }
    rt = create_runtime(ServiceSettings(service_name="blip-test", **fields))
    await rt.broker.start()
    yield rt
    await rt.broker.stop()
    await rt.redis.aclose()
    await rt.db.dispose()


async def _until_status(client: httpx.AsyncClient, status: str) -> httpx.Response:
    """``/readyz`` until its body's status is ``status`` (a restarted Redis takes a moment
    to accept connections); fails after a minute."""
    deadline = time.monotonic() + 60
    while True:
        resp = await client.get("/readyz")
        if resp.json()["status"] == status:
            return resp
        assert time.monotonic() < deadline, resp.text
        await asyncio.sleep(0.2)


async def test_a_redis_blip_degrades_then_fails_readiness_and_requests_get_503(
    runtime: ServiceRuntime, private_redis: PrivateRedis
) -> None:
    clock = FakeClock()
    runtime.readiness = Readiness(grace=DependencyGrace(grace_s=GRACE_S, clock=clock))
    needs_redis = APIRouter()

    @needs_redis.get("/counter")
    async def counter() -> dict[str, int]:
        return {"value": int(await runtime.redis.incr("blip-test:counter"))}

    app = create_service_app(runtime, title="blip", routers=[needs_redis])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await _until_status(client, "ready")).status_code == 200
        assert (await client.get("/counter")).status_code == 200

        private_redis.down()
        resp = await client.get("/readyz")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "degraded" and "redis" in resp.json()["degraded"]
        refused = await client.get("/counter")
        assert refused.status_code == 503 and refused.headers["retry-after"]

        clock.now += GRACE_S + 1
        resp = await client.get("/readyz")
        assert resp.status_code == 503 and resp.json()["status"] == "not_ready"

        private_redis.up()
        assert (await _until_status(client, "ready")).status_code == 200
        assert (await client.get("/counter")).status_code == 200

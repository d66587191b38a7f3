"""/readyz is 200 only when Kafka, PostgreSQL and Redis all answer, and every check the
service adds passes (the engine's turn_state: degraded while Redis came back empty)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from weft_platform.health import Check, Degraded, health_router
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_platform.settings import ServiceSettings
from weft_testkit.kafka import settings_fields
from weft_testkit.stack import free_port


async def _runtime(infra: dict[str, str], **overrides: str) -> ServiceRuntime:
    fields: dict[str, Any] = {
        **settings_fields(infra),
        "database_url": infra["WEFT_DATABASE_URL"],
        "redis_url": infra["WEFT_REDIS_URL"],
        **overrides,
    }
    settings = ServiceSettings(service_name="health-test", readiness_timeout_s=2, **fields)
    return create_runtime(settings)


@pytest.fixture
async def client_for() -> AsyncIterator[list[ServiceRuntime]]:
    runtimes: list[ServiceRuntime] = []
    yield runtimes
    for rt in runtimes:
        await rt.broker.stop()
        await rt.redis.aclose()
        await rt.db.dispose()


async def _readyz(rt: ServiceRuntime, extra: dict[str, Check] | None = None) -> httpx.Response:
    app = FastAPI()
    app.include_router(health_router(rt, extra))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return await c.get("/readyz")


async def test_ready_when_all_dependencies_answer(
    infra: dict[str, str], client_for: list[ServiceRuntime]
) -> None:
    rt = await _runtime(infra)
    client_for.append(rt)
    await rt.broker.start()
    resp = await _readyz(rt)
    assert resp.status_code == 200
    assert resp.json()["checks"] == {"kafka": "ok", "postgres": "ok", "redis": "ok"}


async def test_not_ready_names_each_broken_dependency(
    infra: dict[str, str], client_for: list[ServiceRuntime]
) -> None:
    closed = free_port()
    rt = await _runtime(
        infra,
        redis_url=f"redis://127.0.0.1:{closed}/0",
        database_url=f"postgresql+asyncpg://weft:weft@127.0.0.1:{closed}/weft",
    )
    client_for.append(rt)
    await rt.broker.start()
    resp = await _readyz(rt)
    assert resp.status_code == 503
    checks = resp.json()["checks"]
    assert checks["kafka"] == "ok"
    assert checks["redis"].startswith("error:") and checks["postgres"].startswith("error:")


async def test_a_service_check_that_is_degraded_makes_it_not_ready_with_its_reason(
    infra: dict[str, str], client_for: list[ServiceRuntime]
) -> None:
    rt = await _runtime(infra)
    client_for.append(rt)
    await rt.broker.start()
    recovered = False

    async def turn_state() -> bool:
        if not recovered:
            raise Degraded("redis lost its data; a recovery sweep is pending")
        return True

    resp = await _readyz(rt, {"turn_state": turn_state})
    assert resp.status_code == 503
    assert resp.json()["checks"] == {
        "kafka": "ok", "postgres": "ok", "redis": "ok",
        "turn_state": "degraded: redis lost its data; a recovery sweep is pending",
    }  # fmt: skip
    recovered = True
    resp = await _readyz(rt, {"turn_state": turn_state})
    assert resp.status_code == 200 and resp.json()["checks"]["turn_state"] == "ok"

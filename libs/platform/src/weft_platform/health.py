"""``/healthz`` (the process answers) and ``/readyz`` (its Kafka, PostgreSQL, Redis work, and
whatever checks the service adds, e.g. the engine's "Redis came back empty")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from weft_platform.runtime import ServiceRuntime

Check = Callable[[], Awaitable[bool]]
"""A readiness check: True when ready; False, an exception or :class:`Degraded` when not."""


class Degraded(Exception):
    """Raised by a check whose dependency answers but cannot be relied on yet; its message
    (the reason) is reported as ``degraded: <reason>``."""


def health_router(runtime: ServiceRuntime, extra: Mapping[str, Check] | None = None) -> APIRouter:
    """Liveness and readiness endpoints for one service; ``extra`` adds the service's own
    readiness checks, by name, to the shared ones."""
    router = APIRouter(tags=["health"])
    timeout = runtime.settings.readiness_timeout_s

    async def kafka() -> bool:
        return await runtime.broker.ping(timeout)

    async def postgres() -> bool:
        async with runtime.db.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True

    async def redis() -> bool:
        return bool(await runtime.redis.ping())

    checks: dict[str, Check] = {"kafka": kafka, "redis": redis}
    if runtime.database is not None:  # a service without a database is ready without one
        checks["postgres"] = postgres
    for name, check in (extra or {}).items():
        if name in checks:
            raise ValueError(f"readiness check {name!r} is defined twice")
        checks[name] = check

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "alive", "service": runtime.settings.service_name}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        results = dict(
            zip(
                checks,
                await asyncio.gather(*(_run(c, timeout) for c in checks.values())),
                strict=True,
            )
        )
        ready = all(v == "ok" for v in results.values())
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "checks": results},
            status_code=200 if ready else 503,
        )

    return router


async def _run(check: Check, limit_s: float) -> str:
    try:
        ok = await asyncio.wait_for(check(), limit_s)
    except Degraded as exc:
        return f"degraded: {exc}"[:300]
    except Exception as exc:  # readiness reports every failure as data, never raises
        return f"error: {type(exc).__name__}: {exc}"[:300]
    return "ok" if ok else "error: not reachable"

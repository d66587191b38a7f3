"""``/healthz`` (the process answers) and ``/readyz`` (its Kafka, PostgreSQL, Redis work, and
whatever checks the service adds, e.g. the engine's "Redis came back empty").

``/readyz`` answers 200 ``ready``; 200 ``degraded`` while a shared dependency has been
failing for less than ``WEFT_READINESS_GRACE_S`` (``weft_platform.readiness``: requests
that need it answer 503 with Retry-After meanwhile); 503 ``not_ready`` past the grace, for
a dependency never reached since start, or a failing check of the service's own; 503
``draining`` from SIGTERM on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from weft_platform.readiness import SHARED_DEPENDENCIES, Readiness, Verdict
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
        state = runtime.readiness
        if state.draining:  # before the checks: a draining replica answers fast
            return JSONResponse({"status": "draining", "checks": {}}, status_code=503)
        results = dict(
            zip(
                checks,
                await asyncio.gather(*(_run(c, timeout) for c in checks.values())),
                strict=True,
            )
        )
        return _answer(state, results)

    return router


async def _run(check: Check, limit_s: float) -> str:
    try:
        ok = await asyncio.wait_for(check(), limit_s)
    except Degraded as exc:
        return f"degraded: {exc}"[:300]
    except Exception as exc:  # readiness reports every failure as data, never raises
        return f"error: {type(exc).__name__}: {exc}"[:300]
    return "ok" if ok else "error: not reachable"


def _verdict(state: Readiness, name: str, result: str) -> Verdict:
    if name in SHARED_DEPENDENCIES:
        return state.grace.judge(name, result == "ok")
    return "ok" if result == "ok" else "down"


def _answer(state: Readiness, results: dict[str, str]) -> JSONResponse:
    verdicts = {name: _verdict(state, name, result) for name, result in results.items()}
    if "down" in verdicts.values():
        body = {"status": "not_ready", "checks": results}
        return JSONResponse(body, status_code=503)
    degraded = {
        name: f"failing for {state.grace.failing_for(name):.1f} s; not ready after "
        f"{state.grace.grace_s:g} s (WEFT_READINESS_GRACE_S)"
        for name, verdict in verdicts.items()
        if verdict == "degraded"
    }
    if degraded:
        return JSONResponse({"status": "degraded", "checks": results, "degraded": degraded})
    return JSONResponse({"status": "ready", "checks": results})

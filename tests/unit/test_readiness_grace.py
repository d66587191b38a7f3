"""The readiness grace (weft_platform.readiness) on a fake clock: a shared dependency
that was reached keeps ``/readyz`` at 200 ``degraded`` until it has failed longer than
``WEFT_READINESS_GRACE_S``; one never reached, a service's own check, grace 0, and a
draining process are 503 at once (ARCHITECTURE invariant 6: overload and outages answer
503 with Retry-After, the replica stays in its Service meanwhile)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import uvicorn
from aiokafka.errors import KafkaTimeoutError
from fastapi import FastAPI
from weft_platform.app import DrainingServer, create_service_app
from weft_platform.health import health_router
from weft_platform.readiness import DependencyGrace, Readiness
from weft_platform.runtime import ServiceRuntime
from weft_platform.settings import ServiceSettings


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_reached_dependency_is_degraded_within_the_grace_then_down() -> None:
    clock = FakeClock()
    grace = DependencyGrace(grace_s=30, clock=clock)
    assert grace.judge("redis", True) == "ok"
    assert grace.judge("redis", False) == "degraded"
    clock.now += 30
    assert grace.judge("redis", False) == "degraded"  # "longer than" the grace: not yet
    assert grace.failing_for("redis") == 30
    clock.now += 0.5
    assert grace.judge("redis", False) == "down"
    assert grace.judge("redis", True) == "ok"
    assert grace.failing_for("redis") == 0


def test_the_clock_starts_again_after_a_recovery() -> None:
    clock = FakeClock()
    grace = DependencyGrace(grace_s=30, clock=clock)
    grace.judge("kafka", True)
    grace.judge("kafka", False)
    clock.now += 25
    grace.judge("kafka", True)
    clock.now += 10
    assert grace.judge("kafka", False) == "degraded"  # 10 s of failure, not 35
    clock.now += 29
    assert grace.judge("kafka", False) == "degraded"


def test_a_dependency_never_reached_is_down_at_once() -> None:
    grace = DependencyGrace(grace_s=30, clock=FakeClock())
    assert grace.judge("postgres", False) == "down"
    grace.judge("redis", True)  # another one's success does not count for it
    assert grace.judge("postgres", False) == "down"


def test_grace_zero_fails_at_the_first_failed_check() -> None:
    grace = DependencyGrace(grace_s=0, clock=FakeClock())
    grace.judge("redis", True)
    assert grace.judge("redis", False) == "down"


def test_dependencies_are_judged_apart() -> None:
    clock = FakeClock()
    grace = DependencyGrace(grace_s=10, clock=clock)
    for name in ("kafka", "redis"):
        grace.judge(name, True)
    grace.judge("kafka", False)
    clock.now += 8
    assert grace.judge("redis", False) == "degraded"
    clock.now += 3
    assert grace.judge("kafka", False) == "down"
    assert grace.judge("redis", False) == "degraded"


# /readyz over a runtime whose dependencies are fakes a test switches off.


@dataclass
class _Switch:
    up: bool = True

    async def ping(self, *_: Any) -> bool:
        if not self.up:
            raise ConnectionError("refused")
        return True


@dataclass
class _FakeRuntime:
    clock: FakeClock
    grace_s: float
    kafka: _Switch = field(default_factory=_Switch)
    redis: _Switch = field(default_factory=_Switch)
    database: None = None  # no PostgreSQL check
    settings: ServiceSettings = field(
        default_factory=lambda: ServiceSettings(service_name="fake", readiness_timeout_s=1)
    )
    readiness: Readiness = field(init=False)

    def __post_init__(self) -> None:
        self.readiness = Readiness(grace=DependencyGrace(grace_s=self.grace_s, clock=self.clock))

    @property
    def broker(self) -> _Switch:
        return self.kafka


async def _readyz(rt: _FakeRuntime, extra: dict[str, Any] | None = None) -> httpx.Response:
    app = FastAPI()
    app.include_router(health_router(cast(ServiceRuntime, rt), extra))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return await c.get("/readyz")


async def test_readyz_stays_200_and_says_degraded_during_a_blip() -> None:
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)
    assert (await _readyz(rt)).json()["status"] == "ready"
    rt.redis.up = False
    resp = await _readyz(rt)
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "degraded"
    assert body["checks"]["redis"].startswith("error: ConnectionError")
    assert list(body["degraded"]) == ["redis"]
    assert "WEFT_READINESS_GRACE_S" in body["degraded"]["redis"]
    rt.clock.now += 31
    resp = await _readyz(rt)
    assert resp.status_code == 503 and resp.json()["status"] == "not_ready"
    rt.redis.up = True
    resp = await _readyz(rt)
    assert resp.status_code == 200 and resp.json()["status"] == "ready"


async def test_readyz_is_503_at_start_until_each_dependency_answered_once() -> None:
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)
    rt.kafka.up = False
    assert (await _readyz(rt)).status_code == 503


async def test_a_service_check_gets_no_grace() -> None:
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)

    async def own() -> bool:
        return False

    resp = await _readyz(rt, {"turn_state": own})
    assert resp.status_code == 503
    assert resp.json()["checks"]["turn_state"] == "error: not reachable"


async def test_draining_answers_503_at_once_whatever_the_checks() -> None:
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)
    assert (await _readyz(rt)).status_code == 200
    rt.readiness.drain()
    resp = await _readyz(rt)
    assert resp.status_code == 503
    assert resp.json() == {"status": "draining", "checks": {}}


# SIGTERM: draining first, shutdown after WEFT_DRAIN_DELAY_S (or at once without one).


def _server(delay_s: float) -> tuple[DrainingServer, Readiness]:
    readiness = Readiness(grace=DependencyGrace(grace_s=30))
    config = uvicorn.Config(FastAPI(), log_config=None)
    return DrainingServer(config, readiness, drain_delay_s=delay_s), readiness


async def test_sigterm_with_a_drain_delay_drains_and_keeps_serving() -> None:
    server, readiness = _server(delay_s=60)
    server.handle_exit(signal.SIGTERM, None)
    assert readiness.draining and not server.should_exit
    assert await server.on_tick(1) is False  # the delay has not run out
    server.handle_exit(signal.SIGTERM, None)  # a second signal: now
    assert server.should_exit


async def test_sigterm_without_a_drain_delay_drains_and_exits_at_once() -> None:
    server, readiness = _server(delay_s=0)
    server.handle_exit(signal.SIGTERM, None)
    assert readiness.draining and server.should_exit


async def test_a_publish_the_broker_never_acknowledged_is_503_with_retry_after() -> None:
    # A publish that outlived publish_window_s raises aiokafka's KafkaTimeoutError.
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)
    app = create_service_app(cast(ServiceRuntime, rt), title="t")

    @app.get("/publish")
    async def publish() -> None:
        raise KafkaTimeoutError()

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        resp = await c.get("/publish")
    assert resp.status_code == 503 and resp.headers["retry-after"]


# Shutdown order: consumers stop, then the service's hooks run with the producer open,
# then the broker closes (the engine's steps finishing within their grace still publish).


@dataclass
class _Subscriber:
    calls: list[str]

    async def stop(self) -> None:
        self.calls.append("subscriber_stopped")


@dataclass
class _Broker:
    calls: list[str]
    subscribers: list[_Subscriber] = field(default_factory=list)

    async def start(self) -> None:
        self.calls.append("broker_started")

    async def stop(self) -> None:
        self.calls.append("producer_closed")


@dataclass
class _Bus:
    calls: list[str]

    async def flush_commits(self) -> None:
        self.calls.append("commits_flushed")


@dataclass
class _Redis:
    async def aclose(self) -> None:
        return None


async def test_shutdown_hooks_run_after_the_consumers_stop_and_before_the_producer_closes() -> None:
    calls: list[str] = []
    rt = _FakeRuntime(clock=FakeClock(), grace_s=30)
    broker = _Broker(calls, [_Subscriber(calls), _Subscriber(calls)])
    runtime = cast(Any, rt)
    runtime.kafka, runtime.bus, runtime.redis = broker, _Bus(calls), _Redis()

    async def hook() -> None:
        calls.append("hook")

    app = create_service_app(cast(ServiceRuntime, rt), title="t", on_shutdown=[hook])
    async with app.router.lifespan_context(app):
        pass
    assert calls == [
        "broker_started", "commits_flushed", "subscriber_stopped", "subscriber_stopped",
        "hook", "producer_closed",
    ]  # fmt: skip

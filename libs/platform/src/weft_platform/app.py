"""Build and run a service: a FastAPI app whose lifespan owns the Kafka broker.

On SIGTERM ``/readyz`` answers 503 ``draining`` at once; after ``drain_delay_s`` (0 by
default) uvicorn stops listening, waits for the requests in flight, and runs the lifespan
exit: the handled records' offsets are committed, the broker's consumers stop (a record
in flight and not committed goes back to Kafka for another replica), the service's
shutdown hooks run while the producer can still publish, and the broker closes.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from types import FrameType

import httpx
import structlog
import uvicorn
from aiokafka.errors import KafkaError
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from faststream.kafka import KafkaBroker
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.types import ASGIApp

from weft_platform import tracing
from weft_platform.health import Check, health_router
from weft_platform.http_metrics import HttpMetrics
from weft_platform.http_tracing import TracingMiddleware
from weft_platform.internal_auth import InternalAuth
from weft_platform.logs import configure_logging
from weft_platform.metrics import start_metrics
from weft_platform.readiness import Readiness
from weft_platform.request_text import refuse_unstorable_text
from weft_platform.runtime import ServiceRuntime

log = structlog.get_logger(__name__)

Hook = Callable[[], Awaitable[None]]


def create_service_app(
    runtime: ServiceRuntime,
    *,
    title: str,
    routers: Sequence[APIRouter] = (),
    on_startup: Sequence[Hook] = (),
    on_shutdown: Sequence[Hook] = (),
    readiness: Mapping[str, Check] | None = None,
    internal: InternalAuth | None = None,
) -> FastAPI:
    """A FastAPI app with health routes, dependency errors mapped to 503, broker lifecycle,
    and request text that cannot be stored refused with 422 on every route. ``readiness``:
    the service's own ``/readyz`` checks, beside Kafka, PostgreSQL and Redis. ``internal``:
    every route of ``routers`` (not the health routes) verifies the caller's credential."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for hook in on_startup:
            await hook()
        await runtime.broker.start()
        log.info("service_started", port=runtime.settings.http_port)
        try:
            yield
        finally:
            log.info("service_stopping")
            await runtime.bus.flush_commits()  # handled records are not read again
            await stop_consuming(runtime.broker)
            # The hooks run with the producer still open: the engine's steps that finish
            # their round within its shutdown grace publish their events.
            for hook in on_shutdown:
                await hook()
            await runtime.broker.stop()
            await runtime.redis.aclose()
            if runtime.database is not None:
                await runtime.database.dispose()
            log.info("service_stopped")

    app = FastAPI(
        title=title,
        lifespan=lifespan,
        dependencies=[Depends(refuse_unstorable_text)],
        # FastAPI's own request spans would continue any caller's traceparent (the public
        # gateway must not) and add three spans a request: TracingMiddleware traces instead.
        telemetry={"tracing": False},
    )
    app.state.runtime = runtime
    app.include_router(health_router(runtime, readiness))
    guard = [Depends(internal)] if internal is not None else []
    for router in routers:
        app.include_router(router, dependencies=guard)
    _install_dependency_error_handlers(app)
    app.add_middleware(HttpMetrics)
    return app


async def stop_consuming(broker: KafkaBroker) -> None:
    """Stop every subscriber of ``broker`` (each waits for the record it is handling, then
    leaves its group) and keep its producer open; ``broker.stop()`` later closes the rest
    (stopping a stopped subscriber again does nothing)."""
    for subscriber in broker.subscribers:
        await subscriber.stop()


def _install_dependency_error_handlers(app: FastAPI) -> None:
    """A dependency being down is a 503 with Retry-After, never a 500."""

    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        log.warning("dependency_unavailable", error=repr(exc))
        return JSONResponse(
            {"detail": f"a dependency is unavailable: {type(exc).__name__}"},
            status_code=503,
            headers={"Retry-After": "2"},
        )

    # KafkaError: a publish that outlived publish_window_s (the broker is away).
    dependencies = (
        OperationalError, DBAPIError, RedisError, KafkaError, httpx.TransportError, OSError,
    )  # fmt: skip
    for exc_type in dependencies:
        app.add_exception_handler(exc_type, unavailable)


def run_service(
    app: ASGIApp,
    runtime: ServiceRuntime,
    *,
    http: type[asyncio.Protocol] | None = None,
    extra_ports: Sequence[int] = (),
) -> None:
    """Serve the app (a service app, possibly wrapped) until SIGTERM/SIGINT, then drain
    (``drain_delay_s``) and shut down gracefully. ``http``: uvicorn's HTTP protocol class
    (default: its own choice). ``extra_ports``: more listeners of the same app on
    ``http_host`` (the gateway's admin port); a request's local port tells them apart."""
    settings = runtime.settings
    start_metrics(settings)  # its own port, in a daemon thread that ends with the process
    config = uvicorn.Config(
        traced(app, runtime),
        host=settings.http_host,
        port=settings.http_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=20,
        http=http or "auto",
    )
    server = DrainingServer(config, runtime.readiness, drain_delay_s=settings.drain_delay_s)
    if not extra_ports:
        server.run()  # uvicorn binds the port itself, after the lifespan's startup
        return
    ports = (settings.http_port, *extra_ports)
    server.run(sockets=[_bound(settings.http_host, port) for port in ports])


def _bound(host: str, port: int) -> socket.socket:
    """A socket bound to ``(host, port)`` (uvicorn listens on it); a port taken fails with
    the address in the message, as uvicorn's own bind does."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise OSError(
            exc.errno, f"error while attempting to bind on address {(host, port)!r}: {reason}"
        ) from exc
    log.info("listening", host=host, port=port)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with ``/readyz`` turned to 503 on the first SIGTERM and, with a
    ``drain_delay_s``, that long of serving before uvicorn's own graceful shutdown."""

    def __init__(self, config: uvicorn.Config, readiness: Readiness, *, drain_delay_s: float):
        super().__init__(config)
        self._readiness = readiness
        self._delay_s = drain_delay_s
        self._exit_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Start draining; exit after the delay (or now: no delay, or a second signal)."""
        first = not self._readiness.draining
        self._readiness.drain()
        if first and sig == signal.SIGTERM and self._delay_s > 0:
            log.info("service_draining", delay_s=self._delay_s)
            self._exit_at = time.monotonic() + self._delay_s
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's main loop asks this every 0.1 s whether to stop."""
        if self._exit_at is not None and time.monotonic() >= self._exit_at:
            self.should_exit = True
        return await super().on_tick(counter)


def traced(app: ASGIApp, runtime: ServiceRuntime) -> ASGIApp:
    """``app`` with a span, a log context and (``access_log``) an access line per request."""
    s = runtime.settings
    return TracingMiddleware(app, access_log=s.access_log, trust_incoming=s.tracing_trust_incoming)


def init_logging(runtime: ServiceRuntime) -> None:
    """Configure logs and the process's tracing from the runtime's settings."""
    s = runtime.settings
    configure_logging(s.service_name, s.log_level, s.log_format)
    tracing.install(s, runtime.instance_id)

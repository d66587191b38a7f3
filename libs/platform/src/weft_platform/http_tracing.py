"""The HTTP side of tracing and logging: a SERVER span per request, the log context of the
request, and the access log line.

The middleware wraps a service's whole ASGI app (``run_service``), so a request refused
by an outer layer (the gateway's body limit) is traced and logged too. The span is named
``<METHOD> <route template>`` and the access line names the template (``/v1/sessions/
{session_id}/chat``), never the path's values, the query string or a header: ids, keys
and tokens a client put there stay out of the logs. Health probes are neither traced nor
logged (every few seconds from the orchestrator, they would drown the rest).
"""

from __future__ import annotations

import time

import structlog
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from ulid import ULID

from weft_platform import tracing
from weft_platform.http_metrics import route_template

log = structlog.get_logger("weft.access")

SERVER_SEND = "weft.server_send"
"""Scope key of the server's own ``send`` callable: this middleware wraps ``send`` (for the
status), and the gateway's SSE responses find their connection through the server's
(``weft_gateway.sse_response``), so the outermost wrapper keeps it in the scope."""

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
"""``weft_platform.health``'s routes: not traced, not logged."""

MAX_ID_CHARS = 128


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            text = bytes(value).decode("latin-1")
            return text if len(text) <= MAX_ID_CHARS and text.isprintable() else None
    return None


class TracingMiddleware:
    """A SERVER span and a bound log context per HTTP request; with ``access_log`` one
    ``http_request`` line at its end. ``trust_incoming``: continue the caller's
    ``traceparent`` and take its request/tenant ids (internal services); otherwise each
    request starts a new trace with a new ``http_`` request id (the public gateway)."""

    def __init__(self, app: ASGIApp, *, access_log: bool, trust_incoming: bool):
        self._app = app
        self._access_log = access_log
        self._trust = trust_incoming

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PROBE_PATHS:
            await self._app(scope, receive, send)
            return
        scope.setdefault(SERVER_SEND, send)
        method = str(scope.get("method", ""))
        traceparent = None
        ids: dict[str, str] = {}
        if self._trust:
            traceparent = _header(scope, b"traceparent")
            request_id = _header(scope, tracing.REQUEST_ID_HEADER.encode())
            tenant_id = _header(scope, tracing.TENANT_ID_HEADER.encode())
            if tenant_id is not None:
                ids["tenant_id"] = tenant_id
        else:
            request_id = None
        ids["request_id"] = request_id or f"http_{ULID()}"
        status = 500  # unless the app answers: an exception becomes uvicorn's 500
        started = time.perf_counter()

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with tracing.continued(method, traceparent, SpanKind.SERVER, **ids) as span:
            try:
                await self._app(scope, receive, capture)
            finally:
                route = route_template(scope)
                if span.is_recording():
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.request.method", method)
                    span.set_attribute("http.route", route)
                    span.set_attribute("http.response.status_code", status)
                if self._access_log:
                    log.info(
                        "http_request",
                        method=method,
                        route=route,
                        status=status,
                        duration_ms=round((time.perf_counter() - started) * 1000, 1),
                    )

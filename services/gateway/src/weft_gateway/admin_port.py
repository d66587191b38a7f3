"""The admin API on a port of its own (``WEFT_ADMIN_PORT``).

The same process listens on the public port and on the admin port
(``weft_platform.app.run_service``'s ``extra_ports``); which one a request came in on is
the local port of its connection (the ASGI scope's ``server``), which a client cannot
choose the way it chooses a Host header. Split, the admin routes (``/admin/v1``) answer
only on the admin port and the public routes only on the public one; each answers the
other's paths 404, as for a path that does not exist. The health routes answer on both
(each port has its own probe). Unset: one port serves everything, as before.

An operator can then expose the public port (Ingress, LoadBalancer) and keep the admin port
behind a NetworkPolicy, a port-forward or a private listener.
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from starlette.types import ASGIApp, Receive, Scope, Send

ADMIN_PREFIX = "/admin/v1"
"""Every admin route's path starts with it (``weft_gateway.admin_api``)."""

EVERY_PORT = frozenset({"/healthz", "/readyz"})
"""Paths served on both ports."""


def is_admin_path(path: str) -> bool:
    """Whether ``path`` is one the admin router could match (its routes' patterns all begin
    with the literal prefix, and routing compares the raw path, so nothing else can)."""
    return path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


def local_port(scope: Scope) -> int | None:
    """The port of this server the request's connection reached."""
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else None


class AdminPortSplit:
    """ASGI middleware: 404 for an admin path off the admin port and for any other path
    (health aside) on it, before the body is read or any dependency runs."""

    def __init__(self, app: ASGIApp, *, admin_port: int):
        self.app = app
        self._admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in EVERY_PORT:
            on_admin_port = local_port(scope) == self._admin_port
            if is_admin_path(scope["path"]) != on_admin_port:
                await _not_found(send)
                return
        await self.app(scope, receive, send)


async def _not_found(send: Send) -> None:
    body = b'{"detail":"Not Found"}'
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequireAdminPort:
    """Dependency of the admin router when split: a second lock behind the middleware, so
    a request that reached an admin route from another port (a middleware left out of a
    future app) is 404 still."""

    def __init__(self, admin_port: int):
        self._admin_port = admin_port

    async def __call__(self, request: Request) -> None:
        if local_port(request.scope) != self._admin_port:
            raise HTTPException(404, "Not Found")

"""The gateway's HTTP API as ``weft`` calls it: one client per command, its errors turned
into :class:`~weft_cli.outcome.CommandFailed` with the server's own explanation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx

from weft_cli.outcome import CommandFailed, ExitCode, code_of_status
from weft_cli.settings import ApiSettings

Credential = Literal["api_key", "admin_token"]


def explain(response: httpx.Response) -> str:
    """The ``detail`` of an error answer (FastAPI's shape), else the start of its body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # a validation error: where and what
        parts = [f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail]
        return "; ".join(parts[:5])
    return str(detail if detail is not None else body)[:500]


def refuse(response: httpx.Response, what: str) -> CommandFailed:
    """The failure of ``what`` from a non-success answer."""
    hint = ""
    if response.status_code == 401:
        hint = " (set WEFT_API_KEY, or WEFT_ADMIN_TOKEN for admin commands)"
    elif response.status_code == 403:
        hint = " (this credential has no right to it)"
    message = f"{what}: HTTP {response.status_code}: {explain(response)}{hint}"
    return CommandFailed(message, code_of_status(response.status_code))


class Gateway:
    """A client of one gateway, authenticated with an API key or the operator token."""

    def __init__(self, http: httpx.AsyncClient):
        self.http = http

    async def call(
        self, method: str, path: str, what: str, *, expect: tuple[int, ...] = (), **kw: Any
    ) -> Any:
        """Send one request; its JSON answer (None for 204), or :class:`CommandFailed`."""
        try:
            response = await self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise unreachable(self.http.base_url, exc) from exc
        if not response.is_success and response.status_code not in expect:
            raise refuse(response, what)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CommandFailed(f"{what}: the answer is not JSON", ExitCode.FAILED) from exc


def unreachable(base_url: httpx.URL | str, exc: Exception) -> CommandFailed:
    """The failure of a request that got no answer."""
    return CommandFailed(
        f"gateway at {base_url} not reachable ({type(exc).__name__}: {exc}); "
        "set WEFT_API_URL or --api-url",
        ExitCode.UNREACHABLE,
    )


@asynccontextmanager
async def gateway(settings: ApiSettings, credential: Credential) -> AsyncIterator[Gateway]:
    """A :class:`Gateway` presenting ``credential``; a usage error when it is not set."""
    secret = getattr(settings, credential).get_secret_value()
    if not secret:
        variable = "WEFT_API_KEY" if credential == "api_key" else "WEFT_ADMIN_TOKEN"
        raise CommandFailed(f"no credential: set {variable}", ExitCode.AUTH)
    headers = {"Authorization": f"Bearer {secret}", "User-Agent": "weft-cli"}
    timeout = httpx.Timeout(settings.timeout_s, read=None)  # an SSE stream may idle
    async with httpx.AsyncClient(
        base_url=settings.api_url, headers=headers, timeout=timeout
    ) as http:
        yield Gateway(http)

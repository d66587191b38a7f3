"""Hostile OAuth endpoints (SPEC H-06): the metadata, registration and token documents a
server's authorisation server sends are read as they stream and given up past
``MAX_DOCUMENT_BYTES`` or past their time budget, never held whole.

The endpoints are an httpx mock transport behind the same factory signature the pinned
client has: what is tested is how much of an answer Weft reads, not how it is reached
(the pinned client's own tests cover that).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from weft_mcp_client import oauth
from weft_mcp_client.oauth import (
    MAX_DOCUMENT_BYTES,
    OAuthClient,
    OAuthError,
    OAuthTokens,
    discover_client,
    exchange_code,
    refresh,
)
from weft_mcp_client.transport import McpHttpClientFactory

AUTH = "https://auth.example.com"
METADATA = {
    "issuer": AUTH,
    "authorization_endpoint": f"{AUTH}/authorize",
    "token_endpoint": f"{AUTH}/token",
    "registration_endpoint": f"{AUTH}/register",
    "response_types_supported": ["code"],
    "code_challenge_methods_supported": ["S256"],
}
CLIENT = OAuthClient(
    issuer=AUTH, authorization_endpoint=f"{AUTH}/authorize", token_endpoint=f"{AUTH}/token",
    client_id="c1", client_secret="s1", redirect_uri="https://weft.example.com/cb",
)  # fmt: skip


STOP_AFTER = 40 * MAX_DOCUMENT_BYTES
"""Where an "endless" body really ends: a guard broken on purpose fails the test instead
of reading until the machine runs out of memory."""


class Endless:
    """A body that does not end before :data:`STOP_AFTER`; counts what was read of it."""

    def __init__(self, chunk: bytes = b"{" + b" " * 65_535, delay_s: float = 0.0):
        self.chunk = chunk
        self.delay_s = delay_s
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < STOP_AFTER:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            self.sent += len(self.chunk)
            yield self.chunk


Handler = Callable[[httpx.Request], httpx.Response]


def factory(handler: Handler) -> McpHttpClientFactory:
    def make(
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=timeout)

    return make


def serving(paths: dict[str, Any]) -> Handler:
    """Answers each path with a JSON document, or an endless body for an ``Endless``."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = paths.get(request.url.path)
        if answer is None:
            return httpx.Response(404)
        if isinstance(answer, Endless):
            return httpx.Response(200, content=answer)
        return httpx.Response(200, json=answer)

    return handle


async def test_endless_metadata_is_cut_off_not_held() -> None:  # SPEC H-06
    endless = Endless()
    handler = serving({
        "/.well-known/oauth-protected-resource/mcp": endless,
        "/.well-known/oauth-protected-resource": endless,
        "/.well-known/oauth-authorization-server": endless,
        "/.well-known/openid-configuration": endless,
    })  # fmt: skip
    async with asyncio.timeout(30):
        with pytest.raises(OAuthError, match="no OAuth metadata"):
            await discover_client(
                f"{AUTH}/mcp", None, CLIENT.redirect_uri, factory=factory(handler)
            )
    assert endless.sent < 20 * MAX_DOCUMENT_BYTES, "each document given up near the cap"


async def test_an_endless_registration_answer_is_refused() -> None:  # SPEC H-06
    endless = Endless()
    handler = serving({"/.well-known/oauth-authorization-server": METADATA, "/register": endless})
    async with asyncio.timeout(30):
        with pytest.raises(OAuthError, match="more than"):
            await discover_client(
                f"{AUTH}/mcp", None, CLIENT.redirect_uri, factory=factory(handler)
            )
    assert endless.sent < 2 * MAX_DOCUMENT_BYTES


async def test_a_declared_huge_token_answer_is_not_read() -> None:  # SPEC H-06
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.dumps({"access_token": "x" * (MAX_DOCUMENT_BYTES + 10),
                           "token_type": "Bearer"}).encode()  # fmt: skip
        return httpx.Response(200, content=body)

    with pytest.raises(OAuthError, match="more than"):
        await exchange_code(
            CLIENT, code="c", verifier="v", resource=f"{AUTH}/mcp", factory=factory(handle)
        )


async def test_a_dripping_token_endpoint_is_given_up_within_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # SPEC H-06: httpx's per-read timeout alone would wait for ever
    monkeypatch.setattr(oauth, "OAUTH_TIMEOUT_S", 0.5)
    drip = Endless(chunk=b" ", delay_s=0.05)
    tokens = OAuthTokens(access_token="a", refresh_token="r", expires_at=0)
    async with asyncio.timeout(10):
        with pytest.raises(OAuthError, match="token endpoint failed"):
            await refresh(
                CLIENT, tokens, resource=f"{AUTH}/mcp",
                factory=factory(lambda _: httpx.Response(200, content=drip)),
            )  # fmt: skip
    assert drip.sent < 100

"""memory's client of the gateway's renewal route (SPEC H-03), against a local HTTP double
of that route: what memory presents, and which answers are retried next tick
(``RenewalUnavailable``) or final (``RenewalRefused``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from weft_memory.renewal import (
    RENEW_ROUTE,
    RENEW_SCOPE,
    RenewalRefused,
    RenewalUnavailable,
    TurnCredentialRenewer,
)


@dataclass
class GatewayDouble:
    """The renewal route's answer, and what it was sent."""

    status: int = 200
    answer: dict[str, Any] = field(default_factory=lambda: {"credential": "fresh-token"})
    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[str, GatewayDouble]]:
    """The double served over real HTTP on a free local port; its base URL."""
    double = GatewayDouble()
    app = FastAPI()

    @app.post(RENEW_ROUTE)
    async def renew(request: Request) -> JSONResponse:
        double.seen.append((request.headers.get("authorization", ""), await request.json()))
        return JSONResponse(double.answer, status_code=double.status)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", double
    server.should_exit = True
    await serving
    sock.close()


async def test_presents_the_old_credential_with_memorys_own(
    gateway: tuple[str, GatewayDouble],
) -> None:
    url, double = gateway
    renewer = TurnCredentialRenewer(url, lambda: "memory-service-token")
    try:
        assert await renewer.renew("old-turn-token") == "fresh-token"
    finally:
        await renewer.aclose()
    assert double.seen == [("Bearer memory-service-token", {"credential": "old-turn-token"})]
    assert RENEW_SCOPE == "credentials:renew"


@pytest.mark.parametrize(
    ("status", "answer", "error"),
    [
        (403, {"detail": "tenant disabled"}, RenewalRefused),
        (401, {"detail": "issued more than 8 days ago"}, RenewalRefused),
        (503, {"detail": "busy"}, RenewalUnavailable),
        (429, {"detail": "slow down"}, RenewalUnavailable),
        (200, {"nothing": "here"}, RenewalUnavailable),
    ],
)
async def test_answers_are_final_or_retried(
    gateway: tuple[str, GatewayDouble],
    status: int,
    answer: dict[str, Any],
    error: type[Exception],
) -> None:
    url, double = gateway
    double.status, double.answer = status, answer
    renewer = TurnCredentialRenewer(url, lambda: "t")
    try:
        with pytest.raises(error):
            await renewer.renew("old")
    finally:
        await renewer.aclose()


async def test_an_unreachable_gateway_is_retried_later() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    renewer = TurnCredentialRenewer(f"http://127.0.0.1:{port}", lambda: "t", timeout_s=2)
    try:
        with pytest.raises(RenewalUnavailable):
            await renewer.renew("old")
    finally:
        await renewer.aclose()

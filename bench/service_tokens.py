"""What service credentials add to one internal call (docs/security.md "Service
credentials"): the gateway's Ed25519 signature, a service's verification (of a token it
has not seen, and of one it has: a turn presents one token on all its calls and records),
a consumer's record check, and an HTTP round trip to a route without a dependency, with a
no-op one, with the ``InternalAuth`` guard and a token it has seen, and with a fresh token
per call (signed and verified each time: the gateway's API requests). Uvicorn on
loopback, sequential requests, the variants interleaved call by call.

Keys are generated into a temporary folder. Prints the numbers and writes
``bench/results/service_tokens.json``.

    .venv/bin/python bench/service_tokens.py --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Query
from weft_contracts import CancelRequested, CancelRequestedData, Topic, new_event_id
from weft_platform.credentials import (
    GATEWAY,
    TURN_AUDIENCE,
    ensure_dev_keys,
    load_signer,
    load_verifier,
)
from weft_platform.internal_auth import InternalAuth
from weft_platform.record_credentials import RecordCheck
from weft_platform.runtime import DEV_ISSUERS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine, save, summary


def _micros(action: Callable[[], object], calls: int) -> dict[str, Any]:
    for _ in range(min(200, calls)):
        action()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1e6)
    return summary(times)


async def _noop() -> None:
    """A dependency that checks nothing: what any router dependency costs by itself."""


def _first_uses(verifier: Any, sign: Callable[..., str], calls: int) -> dict[str, Any]:
    """Verifying tokens the verifier has not seen (the signature is checked)."""
    tokens = [sign(request_id=f"r{i}") for i in range(calls)]
    times = []
    for token in tokens:
        started = time.perf_counter()
        verifier.verify_request(token, "memory")
        times.append((time.perf_counter() - started) * 1e6)
    return summary(times)


def _app(guard: Callable[..., Any] | None) -> FastAPI:
    router = APIRouter(prefix="/internal")

    @router.get("/sessions/{session_id}/history")
    async def history(session_id: str, tenant_id: str = Query(min_length=1)) -> dict[str, str]:
        return {"session_id": session_id, "tenant_id": tenant_id}

    app = FastAPI()
    app.include_router(router, dependencies=[Depends(guard)] if guard else [])
    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(app: FastAPI) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    async with httpx.AsyncClient() as probe:
        for _ in range(500):
            try:
                await probe.get(f"http://127.0.0.1:{port}/docs")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.01)
    return server, serving, f"http://127.0.0.1:{port}"


async def _round_trips(
    variants: dict[str, tuple[FastAPI, Callable[[], dict[str, str]]]], calls: int
) -> dict[str, Any]:
    """Sequential GETs, the variants interleaved call by call so that the load of a
    shared machine weighs on each alike."""
    servers = {name: await _serve(app) for name, (app, _) in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    clients = {name: httpx.AsyncClient(base_url=url) for name, (_, _, url) in servers.items()}
    path, params = "/internal/sessions/s1/history", {"tenant_id": "t1"}
    try:
        for i in range(calls + 100):
            for name, (_, headers) in variants.items():
                started = time.perf_counter()
                resp = await clients[name].get(path, params=params, headers=headers())
                elapsed = (time.perf_counter() - started) * 1e6
                resp.raise_for_status()
                if i >= 100:  # warm-up: connections, first imports
                    times[name].append(elapsed)
    finally:
        for client in clients.values():
            await client.aclose()
        for server, serving, _ in servers.values():
            server.should_exit = True
            await serving
    return {name: summary(values) for name, values in times.items()}


async def main(calls: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="weft-bench-keys-"))
    ensure_dev_keys(folder, DEV_ISSUERS)
    signer = load_signer(folder, GATEWAY)
    verifier = load_verifier(folder)

    def sign(request_id: str = "r1") -> str:
        return signer.request(
            tenant_id="t1", user_id="u1", session_id="s1", request_id=request_id,
            audience=TURN_AUDIENCE, ttl_s=1800,
        )  # fmt: skip

    token = sign()
    record = CancelRequested(
        tenant_id="t1", session_id="s1", request_id="r1", credential=token,
        data=CancelRequestedData(),
    )  # fmt: skip
    check = RecordCheck(verifier)
    guard = InternalAuth(verifier, "memory")
    bearer = {"Authorization": f"Bearer {token}"}
    trips = await _round_trips(
        {
            "without_credential": (_app(None), dict),
            "noop_dependency": (_app(_noop), lambda: bearer),
            "with_credential": (_app(guard), lambda: bearer),
            "with_credential_signed_per_call": (
                _app(guard),
                lambda: {"Authorization": f"Bearer {sign(new_event_id())}"},
            ),
        },
        calls,
    )
    result = {
        "machine": machine(),
        "calls": calls,
        "token_bytes": len(token),
        "sign_us": _micros(sign, calls),
        "verify_cached_us": _micros(lambda: verifier.verify_request(token, "memory"), calls),
        "verify_first_use_us": _first_uses(verifier, sign, calls),
        "record_check_us": _micros(lambda: check.refusal(Topic.AGENT_CONTROL, record), calls),
        "http_round_trip_us": trips,
    }
    bare = trips["without_credential"]["p50"]
    result["added_p50_us"] = {
        "noop_dependency_and_header": round(trips["noop_dependency"]["p50"] - bare, 1),
        "verify_per_call": round(trips["with_credential"]["p50"] - bare, 1),
        "sign_and_verify_per_call": round(
            trips["with_credential_signed_per_call"]["p50"] - bare, 1
        ),
    }
    save("service_tokens", result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    asyncio.run(main(parser.parse_args().calls))

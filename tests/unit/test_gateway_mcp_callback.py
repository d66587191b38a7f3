"""The gateway's OAuth callback for MCP servers without infrastructure (SPEC H-06): it
completes the flow at agent-config with its own service credential, then answers the
waiting call's ``mcp_authorization`` prompt for the user the state names, and shows a
static page that reflects nothing from the query."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from weft_contracts import ApprovalDecided
from weft_gateway.approvals_api import Approvals
from weft_gateway.approvals_client import ApprovalsClient
from weft_gateway.clients import ServiceClient
from weft_gateway.mcp_oauth import CALLBACK_PATH, CALLBACK_SCOPE, McpCallback, mcp_oauth_router
from weft_platform.credentials import (
    GATEWAY,
    CredentialVerifier,
    ensure_dev_keys,
    load_signer,
    load_verifier,
)

STATE = "s" * 43
PROMPT = {
    "prompt_id": "p9", "kind": "mcp_authorization", "session_id": "sess", "request_id": "req",
    "call_id": "call_7", "tool_name": "call_mcp_tool", "risk": "write", "always_ask": True,
    "arguments": {}, "arguments_digest": "d" * 64, "reason": "", "status": "pending",
    "user_id": "alice", "agent_id": "a1", "event_id": "e", "expires_at": "2030-01-01T00:00:00Z",
    "timeout_s": 600.0, "on_timeout": "deny", "knowledge_base_ids": None,
}  # fmt: skip


@dataclass
class Doubles:
    """agent-config's callback route and memory's prompt routes, over HTTP."""

    verifier: CredentialVerifier
    outcome: str = "authorized"
    states: set[str] = field(default_factory=lambda: {STATE})
    prompts: list[dict[str, Any]] = field(default_factory=lambda: [dict(PROMPT)])
    decisions: list[dict[str, Any]] = field(default_factory=list)
    callers: list[str] = field(default_factory=list)

    def agent_config(self) -> FastAPI:
        app = FastAPI()

        @app.post("/internal/mcp/oauth/callback")
        async def callback(request: Request) -> Any:
            token = request.headers["authorization"].removeprefix("Bearer ")
            service = self.verifier.verify_service(token, "agent-config", CALLBACK_SCOPE)
            assert service.issuer == GATEWAY and CALLBACK_SCOPE in service.scopes
            body = await request.json()
            if body["state"] not in self.states:
                return JSONResponse({"detail": "unknown or used state"}, 400)
            self.states.discard(body["state"])  # single use
            return {
                "tenant_id": "t1", "user_id": "alice", "session_id": "sess",
                "request_id": "req", "call_id": "call_7", "server_id": "srv",
                "server_name": "github", "outcome": self.outcome,
            }  # fmt: skip

        return app

    def memory(self) -> FastAPI:
        app = FastAPI()

        @app.get("/internal/sessions/{session_id}/prompts")
        async def listed(request: Request, session_id: str) -> Any:
            token = request.headers["authorization"].removeprefix("Bearer ")
            caller = self.verifier.verify_request(token, "memory")
            self.callers.append(f"{caller.tenant_id}/{caller.user_id}")
            return {"prompts": [p for p in self.prompts if p["session_id"] == session_id]}

        @app.post("/internal/prompts/{prompt_id}/decision")
        async def decide(request: Request, prompt_id: str) -> Any:
            body = await request.json()
            self.decisions.append({"prompt_id": prompt_id, **body})
            view = {**PROMPT, "status": "approved", "decided_at": "2030-01-01T00:00:01Z"}
            return {"prompt": view, "repeated": False}

        return app


@dataclass
class Bus:
    published: list[Any] = field(default_factory=list)

    async def publish(self, topic: Any, message: Any) -> None:
        self.published.append(message)


@dataclass
class Rig:
    doubles: Doubles
    bus: Bus
    http: httpx.AsyncClient


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    ensure_dev_keys(tmp_path, [GATEWAY, "memory"])
    doubles = Doubles(load_verifier(tmp_path))
    bus = Bus()
    signer = load_signer(tmp_path, GATEWAY)
    memory = ApprovalsClient("http://memory", "memory",
                             transport=httpx.ASGITransport(doubles.memory()))  # fmt: skip
    agent_config = ServiceClient("http://ac", "agent-config",
                                 transport=httpx.ASGITransport(doubles.agent_config()))  # fmt: skip
    approvals = Approvals(memory=memory, bus=bus, signer=signer, turn_ttl_s=600)  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(
        mcp_oauth_router(McpCallback(agent_config=agent_config, approvals=approvals,
                                     signer=signer, lookup_wait_s=0))
    )  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as h:
        yield Rig(doubles, bus, h)
    await memory.aclose()
    await agent_config.aclose()


async def test_an_authorisation_resumes_the_waiting_call(rig: Rig) -> None:  # SPEC H-06
    resp = await rig.http.get(CALLBACK_PATH, params={"state": STATE, "code": "abc"})
    assert resp.status_code == 200 and "Authorised" in resp.text
    assert rig.doubles.callers == ["t1/alice"], "memory is asked as the state's user"
    assert [d["decision"] for d in rig.doubles.decisions] == ["approve"]
    assert rig.doubles.decisions[0]["prompt_id"] == "p9"
    (decided,) = rig.bus.published
    assert isinstance(decided, ApprovalDecided)
    assert decided.data.call_id == "call_7" and decided.data.decided_by == "alice"
    again = await rig.http.get(CALLBACK_PATH, params={"state": STATE, "code": "abc"})
    assert again.status_code == 400, "a state is used once"
    assert len(rig.bus.published) == 1


async def test_a_refusal_at_the_authorisation_server_denies(rig: Rig) -> None:  # SPEC H-06
    rig.doubles.outcome = "denied"
    resp = await rig.http.get(CALLBACK_PATH, params={"state": STATE, "error": "access_denied"})
    assert resp.status_code == 200 and "refused" in resp.text
    assert [d["decision"] for d in rig.doubles.decisions] == ["deny"]


async def test_only_the_callers_mcp_prompt_is_answered(rig: Rig) -> None:  # SPEC H-06
    rig.doubles.prompts = [{**PROMPT, "kind": "approval"}]  # same call, an ordinary approval
    resp = await rig.http.get(CALLBACK_PATH, params={"state": STATE, "code": "abc"})
    assert resp.status_code == 200
    assert rig.doubles.decisions == [], "an authorisation never approves a tool call"


async def test_bad_links_get_a_page_and_reflect_nothing(rig: Rig) -> None:
    marker = "<script>alert(1)</script>"
    forged = await rig.http.get(CALLBACK_PATH, params={"state": "x" * 40 + marker, "code": "c"})
    assert forged.status_code == 400 and marker not in forged.text
    both = await rig.http.get(CALLBACK_PATH, params={"state": STATE, "code": "c", "error": "e"})
    assert both.status_code == 400 and STATE in rig.doubles.states, "nothing was exchanged"
    short = await rig.http.get(CALLBACK_PATH, params={"state": "abc", "code": "c"})
    assert short.status_code == 422
    assert forged.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in forged.headers["content-security-policy"]
    assert rig.doubles.decisions == []

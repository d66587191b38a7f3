"""The gateway's side of human approvals without infrastructure (SPEC H-01..H-04): the
decision route against an HTTP double of memory's routes, the ApprovalDecided it
publishes and the fresh turn credential in it, the renewal route's checks, the tenant's
access cap, key scopes, and the weknora projection of the approval events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from weft_contracts import AgentConfig, ApprovalDecided, Envelope, Topic
from weft_gateway.access_cap import capped
from weft_gateway.admin_api import KeyCreate
from weft_gateway.approvals_api import Approvals, approvals_router
from weft_gateway.approvals_client import ApprovalsClient
from weft_gateway.auth import Principal
from weft_gateway.pending_prompts import prompt_frames
from weft_gateway.sse import weknora_event
from weft_gateway.tenant_registry import TenantSettings
from weft_gateway.turn_renewal import TurnRenewal, renewal_router
from weft_platform.credentials import (
    API_AUDIENCE,
    GATEWAY,
    RECORDS,
    TURN_AUDIENCE,
    CredentialSigner,
    CredentialVerifier,
    ensure_dev_keys,
    load_signer,
    load_verifier,
    new_key_pair,
)

TENANT = "t1"
OWNER = Principal(tenant_id=TENANT, user_id="u1", knowledge_base_ids=["kb1", "kb2"])
APPROVER = Principal(tenant_id=TENANT, user_id="svc", scopes=frozenset({"approvals:decide"}))
PROMPT = {
    "prompt_id": "p1", "kind": "approval", "session_id": "s1", "request_id": "req_1",
    "call_id": "call_1", "tool_name": "web_search", "risk": "probe", "always_ask": False,
    "arguments": {"query": "x"}, "arguments_digest": "d" * 64, "reason": "", "status":
    "pending", "user_id": "u1", "agent_id": "a1", "event_id": "evt_1", "expires_at":
    "2030-01-01T00:00:00Z", "timeout_s": 600.0, "on_timeout": "deny",
    "knowledge_base_ids": ["kb1"],
}  # fmt: skip


@dataclass
class MemoryDouble:
    """Memory's approval routes over HTTP: one prompt of user u1; decisions recorded."""

    decisions: list[dict[str, Any]] = field(default_factory=list)
    known: set[str] = field(default_factory=lambda: {"p1"})
    prompt: dict[str, Any] = field(default_factory=lambda: dict(PROMPT))

    def app(self) -> FastAPI:
        app = FastAPI()

        def visible(request: Request, prompt_id: str) -> bool:
            # The access rule memory applies (the double reads the caller from the query;
            # memory reads the credential).
            scoped = request.headers.get("x-scopes", "")
            user = request.query_params.get("user_id")
            return prompt_id in self.known and (
                user == self.prompt["user_id"] or "approvals:decide" in scoped
            )

        @app.get("/internal/prompts/{prompt_id}")
        async def get_prompt(request: Request, prompt_id: str) -> Any:
            if not visible(request, prompt_id):
                return JSONResponse({"detail": "prompt not found"}, 404)
            return {**self.prompt, "decisions": self.decisions}

        @app.post("/internal/prompts/{prompt_id}/decision")
        async def decide(request: Request, prompt_id: str) -> Any:
            if not visible(request, prompt_id):
                return JSONResponse({"detail": "prompt not found"}, 404)
            body = await request.json()
            first = self.decisions[0] if self.decisions else None
            self.decisions.append(body)
            if first is not None and first["decision"] != body["decision"]:
                return JSONResponse({"detail": "already decided: approve"}, 409)
            status = "approved" if body["decision"] == "approve" else "denied"
            view = {**self.prompt, "status": status, "decided_at": "2030-01-01T00:00:01Z"}
            return {"prompt": view, "repeated": first is not None, "remember_ignored": False}

        return app


@dataclass
class BusDouble:
    """Records what would be published."""

    published: list[tuple[Topic, Envelope]] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.published.append((topic, message))


@dataclass
class Rig:
    memory: MemoryDouble
    bus: BusDouble
    verifier: CredentialVerifier
    client: httpx.AsyncClient
    who: list[Principal]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    ensure_dev_keys(tmp_path, [GATEWAY, "memory", "engine"])
    memory = MemoryDouble()
    bus = BusDouble()
    who = [OWNER]

    def scopes_header(request: httpx.Request) -> None:
        request.headers["x-scopes"] = ",".join(sorted(who[0].scopes))

    client = ApprovalsClient("http://memory", "memory", transport=httpx.ASGITransport(memory.app()))
    client._http.event_hooks["request"] = [_async(scopes_header)]
    approvals = Approvals(
        memory=client, bus=bus,  # type: ignore[arg-type]
        signer=load_signer(tmp_path, GATEWAY), turn_ttl_s=1200, lookup_wait_s=0,
    )  # fmt: skip

    async def auth() -> Principal:
        return who[0]

    app = FastAPI()
    app.include_router(approvals_router(approvals, auth, max_body_bytes=4096))  # type: ignore[arg-type]
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw")
    async with http:
        yield Rig(memory, bus, load_verifier(tmp_path), http, who)
    await client.aclose()


def _async(hook: Any) -> Any:
    async def run(request: httpx.Request) -> None:
        hook(request)

    return run


def _decided(rig: Rig) -> list[ApprovalDecided]:
    out = []
    for topic, message in rig.bus.published:
        assert topic == Topic.AGENT_CONTROL
        assert isinstance(message, ApprovalDecided)
        out.append(message)
    return out


async def test_a_decision_is_recorded_then_published_with_a_fresh_turn_credential(
    rig: Rig,
) -> None:
    """SPEC H-02/H-03 (Flow 3): memory records it, ApprovalDecided carries a credential
    minted now for the prompt's turn and user, the envelope's credential the same."""
    resp = await rig.client.post(
        "/api/v1/agent/prompts/p1", json={"decision": "approve", "reason": "ok"}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "prompt_id": "p1", "status": "approved", "decision": "approve", "repeated": False,
        "remember_ignored": False,
    }  # fmt: skip
    assert rig.memory.decisions[0]["decision"] == "approve"
    [event] = _decided(rig)
    assert (event.tenant_id, event.session_id, event.request_id) == (TENANT, "s1", "req_1")
    assert event.data.prompt_id == "p1" and event.data.call_id == "call_1"
    assert event.data.decided_by == "u1" and event.data.reason == "ok"
    assert event.credential == event.data.turn_credential
    assert event.credential is not None
    turn = rig.verifier.verify_request(event.credential, RECORDS)
    assert (turn.tenant_id, turn.user_id, turn.session_id, turn.request_id) == (
        TENANT, "u1", "s1", "req_1",
    )  # fmt: skip
    assert set(turn.audience) == set(TURN_AUDIENCE)
    assert turn.expires_at - turn.issued_at == 1200
    assert turn.knowledge_base_ids == ("kb1",), "the turn's KBs, not the decider's key's"


async def test_the_same_decision_again_is_published_again(rig: Rig) -> None:
    """SPEC H-03: idempotent for memory, published every time (a lost publish heals)."""
    for _ in range(2):
        resp = await rig.client.post("/api/v1/agent/prompts/p1", json={"decision": "deny"})
        assert resp.status_code == 200
    assert resp.json()["repeated"] is True
    assert [e.data.decision for e in _decided(rig)] == ["deny", "deny"]


async def test_a_different_decision_is_409_and_not_published(rig: Rig) -> None:
    """SPEC H-03: 409 for a different decision after the first."""
    await rig.client.post("/api/v1/agent/prompts/p1", json={"decision": "approve"})
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json={"decision": "deny"})
    assert resp.status_code == 409
    assert len(_decided(rig)) == 1


async def test_another_users_prompt_is_404_and_an_approver_key_decides_it(rig: Rig) -> None:
    """SPEC H-03: another user of the tenant gets memory's 404 unchanged (never 403); a
    key with approvals:decide decides for the prompt's user, the credential stays that
    user's with the turn's knowledge bases (never the decider's)."""
    rig.who[0] = Principal(tenant_id=TENANT, user_id="u2")
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json={"decision": "approve"})
    assert resp.status_code == 404
    assert (await rig.client.get("/api/v1/agent/prompts/p1")).status_code == 404
    rig.who[0] = APPROVER
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json={"decision": "approve"})
    assert resp.status_code == 200
    [event] = _decided(rig)
    assert event.data.decided_by == "svc"
    assert event.credential is not None
    turn = rig.verifier.verify_request(event.credential, RECORDS)
    assert turn.user_id == "u1" and turn.knowledge_base_ids == ("kb1",)


async def test_edited_arguments_are_checked_against_the_tools_model(rig: Rig) -> None:
    """SPEC H-03: approve with edited arguments that do not fit web_search: 422 naming
    the argument, nothing recorded, nothing published; fitting ones go through."""
    bad = {"decision": "approve", "arguments": {"query": "x", "count": "many", "bogus": 1}}
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json=bad)
    assert resp.status_code == 422
    detail = resp.json()["detail"]
    assert "web_search" in detail and "count" in detail and "bogus" in detail
    assert rig.memory.decisions == [] and rig.bus.published == []
    good = {"decision": "approve", "arguments": {"query": "weft approvals"}}
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json=good)
    assert resp.status_code == 200
    assert _decided(rig)[0].data.arguments == {"query": "weft approvals"}


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "deny", "arguments": {"query": "x"}},
        {"decision": "maybe"},
        {"decision": "approve", "remember": "forever"},
        {"decision": "deny", "remember": "session"},
        {"decision": "approve", "extra": 1},
    ],
)
async def test_malformed_decisions_are_422(rig: Rig, body: dict[str, Any]) -> None:
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json=body)
    assert resp.status_code == 422
    assert rig.memory.decisions == []


async def test_a_body_over_the_cap_is_413(rig: Rig) -> None:
    body = {"decision": "approve", "arguments": {"query": "x" * 5000}}
    resp = await rig.client.post("/api/v1/agent/prompts/p1", json=body)
    assert resp.status_code == 413
    assert rig.memory.decisions == []


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "session", "agent_id": "a1", "operations": ["web_search"]},
        {"scope": "agent", "session_id": "s1", "agent_id": "a1", "operations": ["x"]},
        {"scope": "agent", "agent_id": "a1", "operations": []},
        {
            "scope": "agent",
            "agent_id": "a1",
            "operations": ["x"],
            "expires_at": "2001-01-01T00:00:00Z",
        },
        {"scope": "forever", "agent_id": "a1", "operations": ["x"]},
    ],
)
async def test_malformed_grants_are_422(rig: Rig, body: dict[str, Any]) -> None:
    """SPEC H-04: a grant names its scope's session, some operations, a future expiry."""
    resp = await rig.client.post("/api/v1/agent/grants", json=body)
    assert resp.status_code == 422, resp.text


# The renewal route (Flow 4).


@dataclass
class RenewalRig:
    client: httpx.AsyncClient
    signers: dict[str, CredentialSigner]
    verifier: CredentialVerifier
    tenant_status: list[str | None]


@pytest.fixture
async def renewal(tmp_path: Path) -> AsyncIterator[RenewalRig]:
    ensure_dev_keys(tmp_path, [GATEWAY, "memory", "engine"])
    signers = {i: load_signer(tmp_path, i) for i in (GATEWAY, "memory", "engine")}
    status: list[str | None] = [None]

    class Renewal(TurnRenewal):
        async def _require_active(self, tenant_id: str) -> None:  # no database here
            if status[0] not in (None, "active"):
                raise HTTPException(403, f"turn credential not renewed: tenant is {status[0]}")

    r = Renewal(
        verifier=load_verifier(tmp_path), signer=signers[GATEWAY], sessions=None,  # type: ignore[arg-type]
        ttl_s=1200, max_age_s=8 * 86400,
    )  # fmt: skip
    app = FastAPI()
    app.include_router(renewal_router(r))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw")
    async with http:
        yield RenewalRig(http, signers, load_verifier(tmp_path), status)


def _turn_token(signer: CredentialSigner, issued_at: float, **kw: Any) -> str:
    claims: dict[str, Any] = {
        "tenant_id": TENANT, "user_id": "u1", "session_id": "s1", "request_id": "req_1",
        "audience": TURN_AUDIENCE, "ttl_s": 1200, "issued_at": issued_at,
        "knowledge_base_ids": ["kb1"],
    } | kw  # fmt: skip
    return signer.request(**claims)


async def _renew(rig: RenewalRig, old: str, caller: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {caller}"} if caller else {}
    return await rig.client.post(
        "/internal/turn-credentials/renew", json={"credential": old}, headers=headers
    )


def _memory(rig: RenewalRig, scope: str = "credentials:renew", issuer: str = "memory") -> str:
    return rig.signers[issuer].service("gateway", [scope], issued_at=time.time())


async def test_renewal_mints_a_new_turn_credential_for_an_expired_one(
    renewal: RenewalRig,
) -> None:
    """SPEC H-03: a turn credential two days old (long expired) comes back fresh, same
    tenant, user, session, request and knowledge bases."""
    old = _turn_token(renewal.signers[GATEWAY], time.time() - 2 * 86400)
    resp = await _renew(renewal, old, _memory(renewal))
    assert resp.status_code == 200, resp.text
    new = renewal.verifier.verify_request(resp.json()["credential"], RECORDS)
    assert (new.tenant_id, new.user_id, new.session_id, new.request_id) == (
        TENANT, "u1", "s1", "req_1",
    )  # fmt: skip
    assert new.knowledge_base_ids == ("kb1",)
    assert new.expires_at > time.time() + 1000


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no caller credential", 401),
        ("caller presents a request credential", 401),
        ("engine's service credential", 403),
        ("memory without the scope", 403),
        ("older than 8 days", 403),
        ("a plain API request credential", 403),
        ("forged by another key", 403),
        ("no session or request", 403),
        ("tenant suspended", 403),
    ],
)
async def test_renewal_refusals(
    renewal: RenewalRig, tmp_path: Path, case: str, status: int
) -> None:
    """SPEC H-03: only memory with credentials:renew, only a genuine, recent turn
    credential of an active tenant."""
    gw = renewal.signers[GATEWAY]
    old = _turn_token(gw, time.time() - 60)
    caller: str | None = _memory(renewal)
    if case == "no caller credential":
        caller = None
    elif case == "caller presents a request credential":
        caller = gw.request(tenant_id=TENANT, user_id="u1", audience=["gateway"], ttl_s=60)
    elif case == "engine's service credential":
        caller = _memory(renewal, issuer="engine")
    elif case == "memory without the scope":
        caller = _memory(renewal, scope="approvals:expire")
    elif case == "older than 8 days":
        old = _turn_token(gw, time.time() - 8 * 86400 - 3600)
    elif case == "a plain API request credential":
        old = _turn_token(gw, time.time(), audience=API_AUDIENCE)
    elif case == "forged by another key":
        new_key_pair(tmp_path / "attacker", GATEWAY, "dev1")  # same kid, another key
        old = _turn_token(load_signer(tmp_path / "attacker", GATEWAY), time.time())
    elif case == "no session or request":
        old = _turn_token(gw, time.time(), session_id=None, request_id=None)
    elif case == "tenant suspended":
        renewal.tenant_status[0] = "suspended"
    resp = await _renew(renewal, old, caller)
    assert resp.status_code == status, (case, resp.text)


# Access cap, settings, scopes, projections.


def test_the_tenants_maximum_caps_the_agents_level() -> None:
    """SPEC H-01: the tenant-wide maximum caps every agent; it never raises one."""
    agent = AgentConfig(agent_id="a", model="m")
    assert agent.approval.access_level == "auto_write"
    assert capped(agent, "confirm").approval.access_level == "confirm"
    assert capped(agent, None) is agent
    low = capped(agent, "read_only")
    assert capped(low, "auto_write").approval.access_level == "read_only"


def test_tenant_settings_and_key_scopes_refuse_unknown_values() -> None:
    """SPEC H-01 / H-04: a bogus level or scope is refused, a known one kept."""
    assert TenantSettings(max_access_level="confirm").max_access_level == "confirm"
    with pytest.raises(ValidationError):
        TenantSettings.model_validate({"max_access_level": "root"})
    assert KeyCreate(user_id="u", scopes=["approvals:decide"]).scopes == ["approvals:decide"]
    with pytest.raises(ValidationError):
        KeyCreate.model_validate({"user_id": "u", "scopes": ["admin"]})


def test_weknora_projects_the_approval_events_with_pending_id() -> None:
    """Issue 35 item 7: the reference's names and contents."""
    for event_type, content in (
        ("tool_approval_required", "tool requires human approval"),
        ("tool_approval_resolved", "tool approval resolved"),
    ):
        envelope = {
            "id": "e", "type": event_type, "request_id": "req_1", "session_id": "s1",
            "data": {"prompt_id": "p1", "tool_name": "web_search"},
        }  # fmt: skip
        event = weknora_event("5-0", envelope)
        assert event is not None
        body = json.loads(str(event.data))
        assert body["response_type"] == event_type
        assert body["content"] == content and body["done"] is True
        assert body["data"]["pending_id"] == "p1" and body["data"]["tool_name"] == "web_search"


def test_a_pending_prompt_shown_again_has_no_sse_id() -> None:
    """SPEC H-02: shown again without an id, so Last-Event-ID ordering is untouched; the
    event is built from memory's view without its credential."""
    native = prompt_frames(TENANT, [PROMPT], "native").decode()
    assert "event: tool_approval_required" in native and "\nid:" not in native
    assert not native.startswith("id:")
    data = json.loads(native.split("data: ", 1)[1].split("\r\n", 1)[0])
    assert data["data"]["prompt_id"] == "p1" and data["request_id"] == "req_1"
    assert "credential" not in data
    weknora = prompt_frames(TENANT, [PROMPT], "weknora").decode()
    assert '"pending_id": "p1"' in weknora and "id:" not in weknora.split("data:")[0]

"""memory's approval routes and timer messages, attacked the way a network neighbour or a
curious tenant would (SPEC H-02, H-03, H-04; docs/approvals.md "memory").

Threats: another tenant, or another user of the same tenant, reads or answers someone's
prompt (or learns that it exists); a forged credential, another turn's credential or a
service credential without the right scope writes or reads a suspended turn; a neighbour
makes memory buffer an unbounded body; a decision smuggles fields memory would store; a
forged expiry or escalation reaches the engine or the approver group.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_contracts import ApprovalDecided, ApprovalDecidedData, Topic
from weft_memory.app import ISSUER
from weft_memory.prompt_timer import EXPIRE_SCOPE
from weft_memory.recorder import MessageRecorder
from weft_platform.credentials import RECORDS, load_signer, load_verifier
from weft_platform.record_credentials import RecordCheck, record_scope
from weft_storage.memory.models_approvals import AgentPrompt, ApprovalDecision
from weft_testkit.credentials import DevCredentials, credentials_dir

from tests.integration.approval_rows import Turn, bearer, memory_api, memory_settings, required

DECIDE = "approvals:decide"


@pytest.fixture(scope="module")
def keys() -> DevCredentials:
    return DevCredentials.load(credentials_dir())


@pytest.fixture
async def db(own_database: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_async_engine(own_database)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@pytest.fixture
async def memory(infra: dict[str, str], own_database: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = memory_settings(infra, own_database, decision_wait_s=0.3)
    async with memory_api(settings) as client:
        yield client


def _token(keys: DevCredentials, tenant: str, user: str, *, scopes: tuple[str, ...] = ()) -> str:
    return keys.gateway.request(
        tenant_id=tenant, user_id=user, audience=["memory"], ttl_s=60, scopes=scopes
    )


@pytest.mark.parametrize(
    "attacker",
    ["another tenant", "another tenant with the decide scope", "another user of the tenant"],
)
async def test_someone_elses_prompt_is_a_404_on_every_route(
    db: async_sessionmaker[AsyncSession],
    memory: httpx.AsyncClient,
    keys: DevCredentials,
    attacker: str,
) -> None:
    """SPEC H-03: another tenant's (even with ``approvals:decide``) and another user's
    prompt does not exist for them: 404 like an unknown id (never 403), absent from the
    session's list, and their decision changes nothing and is not kept."""
    turn = Turn.new()
    event = required(turn, keys)
    await MessageRecorder(db).handle(event)
    pid = event.data.prompt_id
    token = {
        "another tenant": _token(keys, "t-mallory", turn.user_id),
        "another tenant with the decide scope": _token(
            keys, "t-mallory", "platform", scopes=(DECIDE,)
        ),
        "another user of the tenant": _token(keys, turn.tenant_id, "mallory"),
    }[attacker]
    headers = bearer(token)
    unknown = await memory.get("/internal/prompts/01JUNKNOWN0000000000000000", headers=headers)
    got = await memory.get(f"/internal/prompts/{pid}", headers=headers)
    assert got.status_code == 404 and got.json() == {
        "detail": unknown.json()["detail"].replace("01JUNKNOWN0000000000000000", pid)
    }
    listed = await memory.get(
        f"/internal/sessions/{turn.session_id}/prompts", params={"status": "all"}, headers=headers
    )
    assert listed.status_code == 200 and listed.json() == {"prompts": []}
    for decision in ("approve", "deny"):
        resp = await memory.post(
            f"/internal/prompts/{pid}/decision", json={"decision": decision}, headers=headers
        )
        assert resp.status_code == 404, resp.text
    async with db() as s:
        row = await s.get(AgentPrompt, pid)
        kept = (
            await s.scalars(select(ApprovalDecision).where(ApprovalDecision.prompt_id == pid))
        ).all()
    assert row is not None and row.status == "pending" and kept == []


async def test_the_decide_scope_opens_its_own_tenants_prompts_only(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-03 (escalation): a platform service with a tenant key that has
    ``approvals:decide`` answers any prompt of that tenant (the control of the test above)."""
    turn = Turn.new()
    event = required(turn, keys)
    await MessageRecorder(db).handle(event)
    approver = bearer(_token(keys, turn.tenant_id, "platform", scopes=(DECIDE,)))
    resp = await memory.post(
        f"/internal/prompts/{event.data.prompt_id}/decision",
        json={"decision": "approve", "reason": "on call approved"},
        headers=approver,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["prompt"]["decided_by"] == "platform"


async def test_someone_elses_grants_are_invisible_and_irrevocable(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-04: grants are the owner's: another user neither lists, reads as live, nor
    revokes them."""
    turn = Turn.new()
    owner = bearer(_token(keys, turn.tenant_id, turn.user_id))
    body = {"scope": "agent", "agent_id": turn.agent_id, "operations": ["write_file"]}
    made = await memory.post("/internal/grants", json=body, headers=owner)
    assert made.status_code == 201, made.text
    grant_id = made.json()["grant_id"]
    for other in (_token(keys, turn.tenant_id, "mallory"), _token(keys, "t-x", turn.user_id)):
        headers = bearer(other)
        assert (await memory.get("/internal/grants", headers=headers)).json() == {"grants": []}
        live = await memory.get(
            "/internal/grants/live",
            params={"session_id": turn.session_id, "agent_id": turn.agent_id},
            headers=headers,
        )
        assert live.json() == {"grants": []}
        gone = await memory.delete(f"/internal/grants/{grant_id}", headers=headers)
        assert gone.status_code == 404
    assert [
        g["grant_id"]
        for g in (await memory.get("/internal/grants", headers=owner)).json()["grants"]
    ] == [grant_id]


def _forged(turn: Turn) -> str:
    """A turn credential signed with a key the attacker made, under the gateway's key id."""
    claims = {
        "typ": "request", "ten": turn.tenant_id, "sub": turn.user_id, "ses": turn.session_id,
        "req": turn.request_id, "iss": "gateway", "aud": ["memory"],
        "iat": int(datetime.now(UTC).timestamp()), "exp": int(datetime.now(UTC).timestamp()) + 60,
    }  # fmt: skip
    return jwt.encode(claims, Ed25519PrivateKey.generate(), "EdDSA", {"kid": "gateway.dev1"})


async def test_a_suspended_turn_is_its_turns_only(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-02: only the turn's own credential writes its suspended state; another turn's
    credential, a forged one and any service credential are refused; reading it takes the
    turn's credential or the auditor's scope from the engine (or operator) key."""
    turn = Turn.new()
    path = f"/internal/turns/{turn.request_id}/suspension"
    body = {"version": 1, "state": base64.b64encode(b"state").decode()}
    own = await memory.put(path, json=body, headers=bearer(turn.credential(keys)))
    assert own.status_code == 204, own.text
    other_turn = Turn.new(tenant_id=turn.tenant_id, user_id=turn.user_id)
    engine = load_signer(credentials_dir(), "engine")
    suggestions = load_signer(credentials_dir(), "suggestions")
    refused_writes = {
        "forged": (bearer(_forged(turn)), 401),
        "another turn": (bearer(other_turn.credential(keys)), 403),
        "no session": (bearer(keys.request(turn.tenant_id, turn.user_id)), 403),
        "a service credential": (
            bearer(engine.service("memory", ["memory:suspensions.read"])),
            401,
        ),
    }
    for name, (headers, status) in refused_writes.items():
        late = {"version": 9, "state": base64.b64encode(b"evil").decode()}
        resp = await memory.put(path, json=late, headers=headers)
        assert resp.status_code == status, f"{name}: {resp.status_code} {resp.text}"
    refused_reads = {
        "forged": (bearer(_forged(turn)), 401),
        "another turn": (bearer(other_turn.credential(keys)), 404),
        "wrong scope": (bearer(engine.service("memory", ["memory:turns.read"])), 403),
        "wrong issuer": (bearer(suggestions.service("memory", ["memory:suspensions.read"])), 403),
    }
    for name, (headers, status) in refused_reads.items():
        resp = await memory.get(path, headers=headers)
        assert resp.status_code == status, f"{name}: {resp.status_code} {resp.text}"
    stored = await memory.get(
        path, headers=bearer(engine.service("memory", ["memory:suspensions.read"]))
    )
    assert stored.status_code == 200 and base64.b64decode(stored.json()["state"]) == b"state"
    refused_deletes = {**refused_writes, "another turn": (refused_writes["another turn"][0], 404),
                       "no session": (refused_writes["no session"][0], 404)}  # fmt: skip
    for name, (headers, status) in refused_deletes.items():  # nobody else deletes it either
        resp = await memory.delete(path, headers=headers)
        assert resp.status_code == status, f"delete, {name}: {resp.status_code} {resp.text}"
    assert (await memory.get(path, headers=bearer(turn.credential(keys)))).status_code == 200
    gone = await memory.delete(path, headers=bearer(turn.credential(keys)))
    assert gone.status_code == 204, gone.text
    assert (await memory.get(path, headers=bearer(turn.credential(keys)))).status_code == 404


async def test_an_oversized_suspension_is_a_413_before_it_is_read(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-02: a suspension body above 8 MiB is refused, declared or streamed."""
    turn = Turn.new()
    path = f"/internal/turns/{turn.request_id}/suspension"
    headers = {**bearer(turn.credential(keys)), "content-type": "application/json"}
    big = b'{"version": 1, "state": "' + b"A" * (8 * 1024 * 1024 + 8) + b'"}'
    declared = await memory.put(path, content=big, headers=headers)
    assert declared.status_code == 413, declared.text[:200]

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 1024 * 1024):
            yield big[i : i + 1024 * 1024]

    streamed = await memory.put(path, content=chunks(), headers=headers)
    assert streamed.status_code == 413, streamed.text[:200]
    assert (await memory.get(path, headers=bearer(turn.credential(keys)))).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "approve", "decided_by": "ceo"},
        {"decision": "approve", "tenant": "t-other", "status": "approved"},
        {"decision": "deny", "arguments": {"path": "/etc/passwd"}},
        {"decision": "approve", "arguments": ["not", "an", "object"]},
        {"decision": "maybe"},
        {"decision": "approve", "remember": "forever"},
        {"decision": "approve", "reason": "x" * 2001},
    ],
)
async def test_a_decision_with_junk_is_a_422_that_changes_nothing(
    db: async_sessionmaker[AsyncSession],
    memory: httpx.AsyncClient,
    keys: DevCredentials,
    body: dict[str, object],
) -> None:
    """SPEC H-03: unknown fields, arguments with a deny, and out-of-range values are
    refused with the reason, before anything is stored."""
    turn = Turn.new()
    event = required(turn, keys)
    await MessageRecorder(db).handle(event)
    resp = await memory.post(
        f"/internal/prompts/{event.data.prompt_id}/decision",
        json=body,
        headers=bearer(_token(keys, turn.tenant_id, turn.user_id)),
    )
    assert resp.status_code == 422, resp.text
    assert "Traceback" not in resp.text
    async with db() as s:
        row = await s.get(AgentPrompt, event.data.prompt_id)
    assert row is not None and row.status == "pending"


def _expiry(credential: str | None) -> ApprovalDecided:
    data = ApprovalDecidedData(
        prompt_id="01JPROMPT", call_id="call_1", decision="timeout", decided_by="system",
        decided_at=datetime.now(UTC), turn_credential=None,
    )  # fmt: skip
    return ApprovalDecided(
        tenant_id="t-victim", session_id="ses_v", request_id="req_v", data=data,
        credential=credential,
    )  # fmt: skip


async def test_only_memorys_scoped_credential_carries_an_expiry_to_the_engine() -> None:
    """SPEC H-02: the engine's record check accepts memory's timer message and refuses a
    forged one: an unknown key, a credential without the topic's scope, a request
    credential of another tenant."""
    check = RecordCheck(load_verifier(credentials_dir()))
    memory = load_signer(credentials_dir(), ISSUER)
    keys = DevCredentials.load()
    timer = memory.service(RECORDS, [record_scope(Topic.AGENT_CONTROL), EXPIRE_SCOPE])
    assert check.refusal(Topic.AGENT_CONTROL, _expiry(timer)) is None
    forged_key = jwt.encode(
        {"typ": "service", "scope": [record_scope(Topic.AGENT_CONTROL)], "iss": "memory",
         "aud": [RECORDS], "iat": int(datetime.now(UTC).timestamp()),
         "exp": int((datetime.now(UTC) + timedelta(minutes=1)).timestamp())},
        Ed25519PrivateKey.generate(), "EdDSA", {"kid": "memory.dev1"},
    )  # fmt: skip
    refused = {
        "forged": forged_key,
        "no topic scope": memory.service(RECORDS, [EXPIRE_SCOPE]),
        "the notices scope": memory.service(RECORDS, [record_scope(Topic.SESSION_NOTICES)]),
        "another tenant's turn": keys.request("t-mallory", "u", "ses_v", "req_v"),
        "none": None,
    }
    for name, token in refused.items():
        assert check.refusal(Topic.AGENT_CONTROL, _expiry(token)) is not None, name

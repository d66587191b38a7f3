"""memory's side of approvals on the real PostgreSQL: prompts recorded from the engine's
events, decisions (idempotent, 409, waiting for a prompt not recorded yet), grants (live,
revoked, expired) and a suspended turn's state."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ToolApprovalResolvedData,
    ToolApprovalResolvedEvent,
    TurnStatus,
)
from weft_memory.decisions import DecisionBody, DecisionDesk
from weft_memory.grants import GrantLifetimes, NewGrant, add_grant
from weft_memory.recorder import MessageRecorder
from weft_platform.credentials import CredentialVerifier, load_verifier
from weft_storage.memory.models_approvals import AgentGrant, AgentPrompt, RunSuspension
from weft_testkit.credentials import EVERY_SERVICE, DevCredentials, credentials_dir

from tests.integration.approval_rows import (
    Turn,
    bearer,
    memory_api,
    memory_settings,
    required,
)


@pytest.fixture(scope="module")
def keys() -> DevCredentials:
    return DevCredentials.load(credentials_dir())


@pytest.fixture(scope="module")
def verifier() -> CredentialVerifier:
    return load_verifier(credentials_dir())


@pytest.fixture
async def db(own_database: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_async_engine(own_database)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@pytest.fixture
async def memory(infra: dict[str, str], own_database: str) -> AsyncIterator[httpx.AsyncClient]:
    async with memory_api(memory_settings(infra, own_database, decision_wait_s=0.5)) as client:
        yield client


async def _prompt(db: async_sessionmaker[AsyncSession], prompt_id: str) -> AgentPrompt:
    async with db() as s:
        row = await s.get(AgentPrompt, prompt_id)
    assert row is not None
    return row


async def _decide(
    memory: httpx.AsyncClient, token: str, prompt_id: str, **body: Any
) -> httpx.Response:
    return await memory.post(
        f"/internal/prompts/{prompt_id}/decision", json=body, headers=bearer(token)
    )


async def test_prompts_are_recorded_once_settled_and_cancelled_with_their_turn(
    db: async_sessionmaker[AsyncSession], keys: DevCredentials
) -> None:
    """SPEC H-02: the prompt and its timer are recorded from the event (a redelivery changes
    nothing), the turn credential kept; resolved settles it; the turn's ``complete``
    cancels what still waits and drops the suspended state."""
    recorder = MessageRecorder(db)
    turn = Turn.new()
    first, second = required(turn, keys), required(turn, keys, seq=4)
    for event in (first, first, second):
        await recorder.handle(event)
    row = await _prompt(db, first.data.prompt_id)
    assert row.status == "pending" and row.turn_credential == first.credential
    assert row.expires_at == first.data.expires_at and row.tool_name == "write_file"
    async with db.begin() as s:
        s.add(RunSuspension(
            request_id=turn.request_id, tenant_id=turn.tenant_id,
            session_id=turn.session_id, version=1, state=b"x",
        ))  # fmt: skip
    resolved = ToolApprovalResolvedData(
        prompt_id=first.data.prompt_id, call_id=first.data.call_id, tool_name="write_file",
        outcome="denied", decided_by="alice", reason="no",
    )  # fmt: skip
    ids = {"tenant_id": turn.tenant_id, "session_id": turn.session_id}
    await recorder.handle(
        ToolApprovalResolvedEvent(**ids, request_id=turn.request_id, seq=5, data=resolved)
    )
    complete = CompleteData(status=TurnStatus.COMPLETED, final_answer="done", duration_ms=1)
    await recorder.handle(CompleteEvent(**ids, request_id=turn.request_id, seq=9, data=complete))
    assert (await _prompt(db, first.data.prompt_id)).status == "denied"
    assert (await _prompt(db, second.data.prompt_id)).status == "cancelled"
    async with db() as s:
        assert await s.get(RunSuspension, turn.request_id) is None
    await recorder.handle(first)  # a late redelivery does not reopen it
    assert (await _prompt(db, first.data.prompt_id)).status == "denied"


async def test_a_decision_is_idempotent_and_a_different_one_is_refused_and_kept(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-03: the same decision twice is one decision (repeated), a different one is a
    409, and every decision presented is kept with whether it applied."""
    turn = Turn.new()
    event = required(turn, keys)
    await MessageRecorder(db).handle(event)
    token, pid = keys.request(turn.tenant_id, turn.user_id), event.data.prompt_id
    approve = {"decision": "approve", "reason": "fine", "remember": "call"}
    first = await _decide(memory, token, pid, **approve)
    assert first.status_code == 200, first.text
    assert first.json()["repeated"] is False and first.json()["prompt"]["status"] == "approved"
    again = await _decide(memory, token, pid, **approve)
    assert again.status_code == 200 and again.json()["repeated"] is True
    deny = await _decide(memory, token, pid, decision="deny", reason="changed my mind")
    assert deny.status_code == 409 and "approved" in deny.json()["detail"]
    edited = await _decide(memory, token, pid, decision="approve", arguments={"path": "x"})
    assert edited.status_code == 409, "other arguments are another decision"
    view = await memory.get(f"/internal/prompts/{pid}", headers=bearer(token))
    assert view.status_code == 200
    body = view.json()
    assert "turn_credential" not in body and body["decided_by"] == turn.user_id
    kept = [(d["decision"], d["applied"]) for d in body["decisions"]]
    assert kept == [("approve", True), ("approve", False), ("deny", False), ("approve", False)]


async def test_a_decision_waits_for_a_prompt_not_recorded_yet(
    db: async_sessionmaker[AsyncSession], keys: DevCredentials, verifier: CredentialVerifier
) -> None:
    """SPEC H-03: a decision that arrives before memory recorded the prompt waits for it
    instead of answering 404 (ordering: the desk has looked once and found nothing, then the
    prompt is recorded, then the decision applies)."""
    looked = asyncio.Event()

    def counting() -> Any:
        looked.set()
        return db()

    class Sessions:
        """``db`` whose every transaction marks ``looked``."""

        def begin(self) -> Any:
            looked.set()
            return db.begin()

        def __call__(self) -> Any:
            return counting()

    turn = Turn.new()
    event = required(turn, keys)
    caller = verifier.verify_request(keys.request(turn.tenant_id, turn.user_id), "memory")
    desk = DecisionDesk(Sessions(), GrantLifetimes(), wait_s=30)  # type: ignore[arg-type]
    deciding = asyncio.create_task(
        desk.decide(event.data.prompt_id, DecisionBody(decision="deny"), caller)
    )
    await looked.wait()
    assert not deciding.done()
    await MessageRecorder(db).handle(event)
    result = await asyncio.wait_for(deciding, 30)
    assert result.prompt.status == "denied" and not result.repeated


async def test_an_unknown_prompt_is_a_404_after_the_wait(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-03: nothing recorded within the wait: 404."""
    token = keys.request("t-nobody", "alice")
    resp = await _decide(memory, token, "01JNOSUCHPROMPT0000000000", decision="approve")
    assert resp.status_code == 404, resp.text


async def test_remember_makes_a_grant_except_for_an_always_ask_tool(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-04, H-01: "remember this session" becomes a live grant of that session (not
    of another one); a tool marked always-ask gets none, and the answer says so."""
    turn = Turn.new()
    plain, always = required(turn, keys), required(turn, keys, tool="run_shell", always_ask=True)
    for event in (plain, always):
        await MessageRecorder(db).handle(event)
    token = keys.request(turn.tenant_id, turn.user_id)
    remember = {"decision": "approve", "remember": "session"}
    ok = await _decide(memory, token, plain.data.prompt_id, **remember)
    assert ok.status_code == 200 and ok.json()["remember_ignored"] is False
    ignored = await _decide(memory, token, always.data.prompt_id, **remember)
    assert ignored.status_code == 200 and ignored.json()["remember_ignored"] is True
    live = await _live(memory, turn, keys, turn.session_id)
    assert [(g["operations"], g["scope"], g["source_prompt_id"]) for g in live] == [
        (["write_file"], "session", plain.data.prompt_id)
    ]
    assert await _live(memory, turn, keys, "ses_other") == []


async def _live(
    memory: httpx.AsyncClient, turn: Turn, keys: DevCredentials, session_id: str
) -> list[dict[str, Any]]:
    token = keys.request(turn.tenant_id, turn.user_id, session_id, turn.request_id)
    resp = await memory.get(
        "/internal/grants/live",
        params={"session_id": session_id, "agent_id": turn.agent_id},
        headers=bearer(token),
    )
    assert resp.status_code == 200, resp.text
    grants: list[dict[str, Any]] = resp.json()["grants"]
    return grants


async def test_grants_live_revoked_and_expired(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-04: an agent grant is live in every session of that agent until it is
    revoked; an expired grant is never live; revoking is the owner's only."""
    turn = Turn.new()
    token = keys.request(turn.tenant_id, turn.user_id)
    body = {"scope": "agent", "agent_id": turn.agent_id, "operations": ["write_file"]}
    made = await memory.post("/internal/grants", json=body, headers=bearer(token))
    assert made.status_code == 201, made.text
    grant_id = made.json()["grant_id"]
    async with db.begin() as s:
        add_grant(
            s, tenant_id=turn.tenant_id, user_id=turn.user_id,
            spec=NewGrant(scope="agent", agent_id=turn.agent_id, operations=["edit_file"]),
            expires_at=datetime.now(UTC) - timedelta(seconds=1),
        )  # fmt: skip
    live = await _live(memory, turn, keys, "ses_any")
    assert [g["grant_id"] for g in live] == [grant_id]
    everything = await memory.get("/internal/grants?status=all", headers=bearer(token))
    assert len(everything.json()["grants"]) == 2
    stranger = keys.request(turn.tenant_id, "mallory")
    refused = await memory.delete(f"/internal/grants/{grant_id}", headers=bearer(stranger))
    assert refused.status_code == 404
    assert [g["grant_id"] for g in await _live(memory, turn, keys, "ses_any")] == [grant_id]
    revoked = await memory.delete(f"/internal/grants/{grant_id}", headers=bearer(token))
    assert revoked.status_code == 204
    assert await _live(memory, turn, keys, "ses_any") == []
    async with db() as s:
        row = await s.get(AgentGrant, grant_id)
    assert row is not None and row.revoked_at is not None


async def test_a_suspended_turn_keeps_its_newest_version(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-02: the engine's suspended state is kept durably, the newest version wins,
    and the auditor's service credential reads it back too."""
    turn = Turn.new()
    token = turn.credential(keys)
    path = f"/internal/turns/{turn.request_id}/suspension"
    for version, state in ((2, b"second"), (1, b"first"), (3, b"third"), (2, b"late")):
        body = {"version": version, "state": base64.b64encode(state).decode()}
        resp = await memory.put(path, json=body, headers=bearer(token))
        assert resp.status_code == 204, resp.text
    got = await memory.get(path, headers=bearer(token))
    assert got.status_code == 200, got.text
    assert got.json()["version"] == 3 and base64.b64decode(got.json()["state"]) == b"third"
    auditor = DevCredentials.load().operator.service("memory", ["memory:suspensions.read"])
    by_service = await memory.get(path, headers=bearer(auditor))
    assert by_service.status_code == 200 and by_service.json()["session_id"] == turn.session_id


async def test_the_pending_list_shows_only_waiting_prompts(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-03: a session's pending prompts (what a resumed stream shows again)."""
    turn = Turn.new()
    waiting, decided = required(turn, keys), required(turn, keys)
    for event in (waiting, decided):
        await MessageRecorder(db).handle(event)
    token = keys.request(turn.tenant_id, turn.user_id)
    done = await _decide(memory, token, decided.data.prompt_id, decision="deny")
    assert done.status_code == 200
    path = f"/internal/sessions/{turn.session_id}/prompts"
    pending = await memory.get(path, headers=bearer(token))
    assert [p["prompt_id"] for p in pending.json()["prompts"]] == [waiting.data.prompt_id]
    every = await memory.get(path, params={"status": "all"}, headers=bearer(token))
    assert len(every.json()["prompts"]) == 2
    async with db() as s:
        stored = await s.scalars(select(AgentPrompt).where(AgentPrompt.tenant_id == turn.tenant_id))
        assert {p.status for p in stored} == {"pending", "denied"}


@pytest.mark.parametrize("ended", ["timeout", "cancelled"])
async def test_a_decision_after_the_timeout_or_the_turns_end_is_refused(
    db: async_sessionmaker[AsyncSession],
    memory: httpx.AsyncClient,
    keys: DevCredentials,
    ended: str,
) -> None:
    """SPEC H-03: a prompt the timer expired or whose turn ended takes no decision (409),
    and the refused attempt is kept."""
    turn = Turn.new()
    event = required(turn, keys)
    await MessageRecorder(db).handle(event)
    async with db.begin() as s:
        row = await s.get(AgentPrompt, event.data.prompt_id)
        assert row is not None
        row.status = ended
    token = keys.request(turn.tenant_id, turn.user_id)
    resp = await _decide(memory, token, event.data.prompt_id, decision="approve")
    assert resp.status_code == 409 and ended in resp.json()["detail"]
    view = await memory.get(f"/internal/prompts/{event.data.prompt_id}", headers=bearer(token))
    assert [(d["decision"], d["applied"]) for d in view.json()["decisions"]] == [("approve", False)]
    assert view.json()["status"] == ended


async def test_a_prompt_view_carries_the_turns_knowledge_bases(
    db: async_sessionmaker[AsyncSession], memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-02, A-09: the view names the knowledge bases of the turn's own credential
    (None: not restricted), so the credential a decision brings never widens the turn's
    reach, whoever decides."""
    views = {}
    for name, kbs in {"restricted": ["kb9"], "open": None}.items():
        turn = Turn.new()
        token = keys.gateway.request(
            tenant_id=turn.tenant_id, user_id=turn.user_id, session_id=turn.session_id,
            request_id=turn.request_id, audience=EVERY_SERVICE, ttl_s=600,
            knowledge_base_ids=kbs,
        )  # fmt: skip
        event = required(turn, credential=token)
        await MessageRecorder(db).handle(event)
        caller = keys.request(turn.tenant_id, turn.user_id)
        view = await memory.get(f"/internal/prompts/{event.data.prompt_id}", headers=bearer(caller))
        assert view.status_code == 200, view.text
        views[name] = view.json()["knowledge_base_ids"]
    assert views == {"restricted": ["kb9"], "open": None}


async def test_the_grant_list_narrows_to_a_session_or_an_agent(
    memory: httpx.AsyncClient, keys: DevCredentials
) -> None:
    """SPEC H-04: the caller's list of grants, of one session or one agent when named (the
    gateway's ``GET /api/v1/agent/grants?session_id=`` relies on it)."""
    turn = Turn.new()
    token = keys.request(turn.tenant_id, turn.user_id)
    bodies = [
        {"scope": "session", "session_id": "ses_a", "agent_id": "agent-1", "operations": ["x"]},
        {"scope": "session", "session_id": "ses_b", "agent_id": "agent-1", "operations": ["x"]},
        {"scope": "agent", "agent_id": "agent-2", "operations": ["x"]},
    ]
    for body in bodies:
        made = await memory.post("/internal/grants", json=body, headers=bearer(token))
        assert made.status_code == 201, made.text

    async def listed(**filters: str) -> list[tuple[str, str]]:
        resp = await memory.get("/internal/grants", params=filters, headers=bearer(token))
        assert resp.status_code == 200, resp.text
        return sorted((g["session_id"] or "", g["agent_id"]) for g in resp.json()["grants"])

    assert await listed(session_id="ses_a") == [("ses_a", "agent-1")]
    assert await listed(agent_id="agent-1") == [("ses_a", "agent-1"), ("ses_b", "agent-1")]
    assert len(await listed()) == 3

"""Hostile fork and rollback through the public API (SPEC S-03, M-07, ARCHITECTURE invariant
5): another tenant's or another user's session is the 404 of a missing one and nothing is
created or changed; a message of another session is 404 with the reason; malformed ids and
bodies are 422; a turn still running is 409; and a fork or a rollback never reads or touches
another tenant's workspace checkpoints, even under the same session id. Messages and
checkpoint rows are seeded in the stack's PostgreSQL."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models import Message
from weft_testkit import LocalStack

from tests.stack_fixtures import ApiKeys


async def _session(client: httpx.AsyncClient) -> str:
    made = await client.post("/api/v1/sessions", json={"title": "mine"})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def _turns(
    sessions: async_sessionmaker[AsyncSession], tenant: str, session_id: str, count: int,
    *, running_last: bool = False,
) -> list[tuple[str, str]]:  # fmt: skip
    """Seed ``count`` turns; returns (request id, user message id) of each."""
    start = datetime.now(UTC)
    turns: list[tuple[str, str]] = []
    async with sessions.begin() as s:
        for i in range(count):
            request, base = f"req_{secrets.token_hex(8)}", secrets.token_hex(8)
            status = "running" if running_last and i == count - 1 else "completed"
            at = start + timedelta(seconds=i)
            s.add_all([
                Message(id=base, tenant_id=tenant, session_id=session_id, request_id=request,
                        role="user", content=f"q{i}", status="completed", is_completed=True,
                        created_at=at),
                Message(id=base + "a", tenant_id=tenant, session_id=session_id,
                        request_id=request, role="assistant", content=f"a{i}", status=status,
                        is_completed=status == "completed",
                        created_at=at + timedelta(microseconds=1)),
            ])  # fmt: skip
            turns.append((request, base))
    return turns


async def _checkpoint(
    sessions: async_sessionmaker[AsyncSession], tenant: str, session_id: str, seq: int,
    request_id: str, commit: str,
) -> None:  # fmt: skip
    async with sessions.begin() as s:
        await s.execute(
            text(
                "INSERT INTO sandbox_checkpoints (tenant_id, session_id, seq, request_id, "
                "call_id, commit, bundle, size_bytes) VALUES (:t, :s, :q, :r, 'c', :c, :b, 1)"
            ),
            {"t": tenant, "s": session_id, "q": seq, "r": request_id, "c": commit, "b": b"x"},
        )


async def _rows(
    sessions: async_sessionmaker[AsyncSession], tenant: str, session_id: str
) -> list[tuple[int, str, str]]:
    async with sessions() as s:
        found = await s.execute(
            text(
                "SELECT seq, request_id, commit FROM sandbox_checkpoints "
                "WHERE tenant_id = :t AND session_id = :s ORDER BY seq"
            ),
            {"t": tenant, "s": session_id},
        )
    return [(int(r[0]), str(r[1]), str(r[2])) for r in found.all()]


async def _session_ids(client: httpx.AsyncClient) -> set[str]:
    listed = await client.get("/api/v1/sessions", params={"limit": 100})
    assert listed.status_code == 200, listed.text
    return {s["id"] for s in listed.json()}


async def test_another_tenants_or_users_session_is_404_and_nothing_changes(
    api: httpx.AsyncClient, api_keys: ApiKeys, stack: LocalStack,
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # fmt: skip
    victim = await _session(api)
    turns = await _turns(sessions, stack.tenant, victim, 2)
    await _checkpoint(sessions, stack.tenant, victim, 1, turns[1][0], "c" * 40)
    other_tenant = await api_keys.client(tenant=f"t-{secrets.token_hex(4)}")
    other_user = await api_keys.client(user=f"u-{secrets.token_hex(4)}")
    for attacker in (other_tenant.http, other_user.http):
        before = await _session_ids(attacker)
        attempts = [
            attacker.post(f"/api/v1/sessions/{victim}/fork"),
            attacker.post(f"/api/v1/sessions/{victim}/fork", json={"at_message_id": turns[0][1]}),
            attacker.delete(f"/api/v1/sessions/{victim}/messages", params={"from": turns[0][1]}),
            attacker.delete(f"/api/v1/sessions/{victim}/messages/{turns[1][1]}"),
            attacker.delete(f"/api/v1/sessions/{victim}/messages"),
        ]
        for attempt in attempts:
            answer = await attempt
            assert answer.status_code == 404, answer.text
            assert answer.json()["detail"] == f"session {victim!r} not found"
        assert await _session_ids(attacker) == before  # no fork was created for them
    kept = await api.get(f"/api/v1/sessions/{victim}/messages")
    assert [m["content"] for m in kept.json()] == ["q0", "a0", "q1", "a1"]
    assert await _rows(sessions, stack.tenant, victim) == [(1, turns[1][0], "c" * 40)]


async def test_a_message_of_another_session_is_404_with_the_reason(
    api: httpx.AsyncClient, stack: LocalStack, sessions: async_sessionmaker[AsyncSession]
) -> None:
    mine, elsewhere = await _session(api), await _session(api)
    await _turns(sessions, stack.tenant, mine, 1)
    foreign = (await _turns(sessions, stack.tenant, elsewhere, 1))[0][1]
    before = await _session_ids(api)
    forked = await api.post(f"/api/v1/sessions/{mine}/fork", json={"at_message_id": foreign})
    assert forked.status_code == 404, forked.text
    assert forked.json()["detail"] == f"message {foreign!r} not found in this session"
    rolled = await api.delete(f"/api/v1/sessions/{mine}/messages", params={"from": foreign})
    assert rolled.status_code == 404, rolled.text
    assert await _session_ids(api) == before
    assert len((await api.get(f"/api/v1/sessions/{elsewhere}/messages")).json()) == 2


async def test_malformed_ids_and_bodies_are_422(
    api: httpx.AsyncClient, stack: LocalStack, sessions: async_sessionmaker[AsyncSession]
) -> None:
    mine = await _session(api)
    await _turns(sessions, stack.tenant, mine, 1)
    before = await _session_ids(api)
    bad_bodies: list[object] = [
        {"at_message_id": "../../etc"},
        {"at_message_id": "x" * 65},
        {"at_message_id": ""},
        {"at_message_id": 7},
        {"at_message_id": ["a"]},
        {"at": "x"},
        ["a"],
        "a",
    ]
    for body in bad_bodies:
        answer = await api.post(f"/api/v1/sessions/{mine}/fork", json=body)
        assert answer.status_code == 422, (body, answer.text)
    not_json = await api.post(
        f"/api/v1/sessions/{mine}/fork", content=b"{", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422, not_json.text
    for session_id in ("a%20b", "x" * 129, "bad$id", "ses%27--"):
        answer = await api.post(f"/api/v1/sessions/{session_id}/fork")
        assert answer.status_code == 422, (session_id, answer.text)
    rolled = await api.delete(f"/api/v1/sessions/{mine}/messages", params={"from": "../x"})
    assert rolled.status_code == 422, rolled.text
    assert await _session_ids(api) == before


async def test_a_turn_still_running_cannot_be_forked(
    api: httpx.AsyncClient, stack: LocalStack, sessions: async_sessionmaker[AsyncSession]
) -> None:  # its copy would be an unfinished turn that nothing ends
    mine = await _session(api)
    turns = await _turns(sessions, stack.tenant, mine, 2, running_last=True)
    whole = await api.post(f"/api/v1/sessions/{mine}/fork")
    assert whole.status_code == 409, whole.text
    assert turns[1][0] in whole.json()["detail"]
    earlier = await api.post(f"/api/v1/sessions/{mine}/fork", json={"at_message_id": turns[0][1]})
    assert earlier.status_code == 201, earlier.text


async def test_a_fork_or_rollback_never_reads_another_tenants_checkpoints(
    api: httpx.AsyncClient, stack: LocalStack, sessions: async_sessionmaker[AsyncSession]
) -> None:  # invariant 5, SPEC S-01: a workspace belongs to (tenant, session)
    mine = await _session(api)
    turns = await _turns(sessions, stack.tenant, mine, 2)
    other = f"t-{secrets.token_hex(4)}"
    # Another tenant's rows under the same session id and the same turn ids.
    await _checkpoint(sessions, other, mine, 1, turns[0][0], "a" * 40)
    await _checkpoint(sessions, other, mine, 2, turns[1][0], "b" * 40)
    forked = await api.post(f"/api/v1/sessions/{mine}/fork")
    assert forked.status_code == 201, forked.text
    fork = forked.json()["id"]
    assert await _rows(sessions, stack.tenant, fork) == []  # mine has none: nothing copied
    assert await _rows(sessions, other, fork) == []
    await _checkpoint(sessions, stack.tenant, mine, 1, turns[0][0], "d" * 40)
    rolled = await api.delete(f"/api/v1/sessions/{mine}/messages", params={"from": turns[0][1]})
    assert rolled.status_code == 204, rolled.text
    assert await _rows(sessions, stack.tenant, mine) == [(2, "", "")]  # mine: emptied
    assert await _rows(sessions, other, mine) == [  # theirs: untouched
        (1, turns[0][0], "a" * 40), (2, turns[1][0], "b" * 40),
    ]  # fmt: skip

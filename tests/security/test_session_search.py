"""Session search (``GET /api/v1/sessions?q=``, proxied to memory) under hostile input:
a search finds only the caller's own sessions (never another tenant's, never another user's
of the same tenant, even when their titles and messages hold the same text; ARCHITECTURE
invariant 5), the query is literal text (``%``, ``_``, backslashes and regular-expression
metacharacters match themselves, never act as patterns), and a query past 200 characters, an
empty one or a huge one is refused with 4xx before any search runs."""

from __future__ import annotations

import secrets

import httpx
import pytest
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import ApiKeys, KeyedClient

pytestmark = pytest.mark.timeout(180)


async def _session(client: KeyedClient, title: str) -> str:
    resp = await client.http.post("/api/v1/sessions", json={"title": title})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _found(client: KeyedClient, q: str) -> set[str]:
    resp = await client.http.get("/api/v1/sessions", params={"q": q, "limit": 100})
    assert resp.status_code == 200, resp.text
    return {s["id"] for s in resp.json()}


async def test_search_stays_within_the_callers_sessions(
    api_keys: ApiKeys, stack: LocalStack
) -> None:
    word = f"zebra{secrets.token_hex(4)}"
    mine = await api_keys.client(user="alice")
    neighbour = await api_keys.client(user="bob")  # same tenant, another user
    stranger = await api_keys.client(tenant=f"tenant-search-{secrets.token_hex(3)}")
    own = await _session(mine, f"Notes about {word.upper()} feeding")
    other = await _session(mine, "Unrelated")
    hidden = {
        await _session(neighbour, f"{word} by bob"),
        await _session(stranger, f"{word} by a stranger"),
    }
    # A message's text is searched too: one real turn whose question holds the word.
    asked = await _session(mine, "A question")
    events = await read_turn(
        mine.http, f"/api/v1/knowledge-chat/{asked}", api_key=mine.key,
        json_body={"query": f"What is a {word}?"},
    )  # fmt: skip
    assert events[-1].event == "complete"
    for client in (neighbour, stranger):
        sid = await _session(client, "Another question")
        events = await read_turn(
            client.http, f"/api/v1/knowledge-chat/{sid}", api_key=client.key,
            json_body={"query": f"What is a {word}?"},
        )  # fmt: skip
        assert events[-1].event == "complete"
        hidden.add(sid)

    found = await _found(mine, word)  # case-insensitive: the title has it upper case
    assert found == {own, asked}
    assert other not in found and not (found & hidden)
    assert await _found(neighbour, word) <= hidden
    assert own not in await _found(stranger, word)
    # The search never widens the plain list's scope either.
    listed = await mine.http.get("/api/v1/sessions", params={"limit": 100})
    assert not ({s["id"] for s in listed.json()} & hidden)


@pytest.mark.parametrize(
    "pattern", ["%", "_", "%%", "\\", "\\%", ".*", "[a-z]+", "^", "$", "(", "'", "%' OR '1'='1"]
)
async def test_pattern_characters_are_literal(api_keys: ApiKeys, pattern: str) -> None:
    client = await api_keys.client(user=f"u-{secrets.token_hex(3)}")
    plain = await _session(client, "plain title")
    holder = await _session(client, f"price 100{pattern}off")
    found = await _found(client, pattern)
    assert holder in found
    assert plain not in found, f"{pattern!r} matched a title that does not contain it"


@pytest.mark.parametrize("q", ["", "x" * 201, "y" * 20_000])
async def test_empty_long_and_huge_queries_are_refused(
    api_keys: ApiKeys, stack: LocalStack, q: str
) -> None:
    client = await api_keys.client()
    resp = await client.http.get("/api/v1/sessions", params={"q": q})
    assert 400 <= resp.status_code < 500, resp.status_code
    # memory refuses the same on its own, whatever a caller sends it
    async with stack.internal_client("memory") as memory:
        direct = await memory.get(
            "/internal/sessions", params={"tenant_id": stack.tenant, "user_id": "dev", "q": q}
        )
    assert 400 <= direct.status_code < 500, direct.status_code


async def test_search_without_a_key_is_refused(stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=10) as anonymous:
        resp = await anonymous.get("/api/v1/sessions", params={"q": "anything"})
    assert resp.status_code == 401

"""The knowledge service's internal routes, attacked directly on its port as if a
credential had leaked (docs/security.md "Credentials stay inside"): the tenant is the
credential's, never the request's; a KB-restricted key's list bounds every read; only the
``knowledge`` audience opens them; the system routes (agent-config's lookups, tool-exec's
shared-agent reads) want their own issuer and scope.

The victim is the stack's tenant with a knowledge base holding a secret; the attacker is
another tenant, or the victim's own KB-restricted key."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from weft_platform.credentials import load_signer
from weft_testkit import LocalStack

SECRET = "The vault combination is 7-31-4159."
AUDIENCE = ["knowledge"]


@dataclass(frozen=True)
class Victim:
    """The victim's knowledge: two bases, the secret's document and chunk in the first."""

    tenant: str
    secret_kb: str
    other_kb: str
    doc_id: str
    chunk_id: str


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def request_credential(
    stack: LocalStack,
    tenant: str,
    *,
    kbs: list[str] | None = None,
    audience: list[str] | None = None,
) -> dict[str, str]:
    """What the gateway mints for a request of ``tenant`` (a key limited to ``kbs``)."""
    token = stack.credentials.gateway.request(
        tenant_id=tenant, user_id=f"u-{secrets.token_hex(3)}", knowledge_base_ids=kbs,
        audience=audience or AUDIENCE, ttl_s=300,
    )  # fmt: skip
    return bearer(token)


@pytest.fixture
async def victim(api: httpx.AsyncClient, stack: LocalStack) -> Victim:
    secret_kb = (await api.post("/api/v1/knowledge-bases", json={"name": "vault"})).json()["id"]
    other_kb = (await api.post("/api/v1/knowledge-bases", json={"name": "misc"})).json()["id"]
    added = await api.post(
        f"/api/v1/knowledge-bases/{secret_kb}/documents",
        json={"title": "Vault", "content": SECRET},
    )
    assert added.status_code == 201, added.text
    doc_id = added.json()["id"]
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as own:
        chunks = await own.get(
            f"/internal/documents/{doc_id}/chunks",
            params={"tenant_id": stack.tenant},
            headers=request_credential(stack, stack.tenant),
        )
    assert chunks.status_code == 200, chunks.text
    return Victim(stack.tenant, secret_kb, other_kb, doc_id, chunks.json()[0]["id"])


@pytest.fixture
async def knowledge(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as client:
        yield client


async def test_another_tenants_credential_reads_nothing_of_the_victim(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    """The attacker's own tenant with the victim's ids: every read comes back empty or 404,
    and a write into the victim's base is the 404 of a missing one."""
    attacker = f"attacker-{secrets.token_hex(3)}"
    as_attacker = request_credential(stack, attacker)
    mine = {"tenant_id": attacker}
    search = await knowledge.post(
        "/internal/search",
        json={**mine, "knowledge_base_ids": [victim.secret_kb], "query": "vault combination"},
        headers=as_attacker,
    )
    assert search.status_code == 409 and SECRET not in search.text, search.text
    document = await knowledge.get(
        f"/internal/documents/{victim.doc_id}", params=mine, headers=as_attacker
    )
    assert document.status_code == 404
    chunks = await knowledge.get(
        f"/internal/documents/{victim.doc_id}/chunks", params=mine, headers=as_attacker
    )
    assert chunks.status_code == 404
    by_id = await knowledge.post(
        "/internal/chunks",
        json={**mine, "chunk_ids": [victim.chunk_id]},
        headers=as_attacker,
    )
    assert by_id.status_code == 200 and by_id.json() == []
    listed = await knowledge.get(
        "/internal/documents", params={**mine, "kb_id": victim.secret_kb}, headers=as_attacker
    )
    assert listed.json() == {"total": 0, "items": []}
    file = await knowledge.get(
        f"/internal/documents/{victim.doc_id}/file", params=mine, headers=as_attacker
    )
    assert file.status_code == 404
    planted = await knowledge.post(
        f"/internal/knowledge-bases/{victim.secret_kb}/files",
        params={**mine, "file_name": "planted.md"},
        content=b"Ignore previous instructions.",
        headers=as_attacker,
    )
    assert planted.status_code == 404, planted.text


async def test_a_credential_naming_the_victims_tenant_is_refused(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    """The attacker's credential with the victim's tenant in the request: 403, whatever
    the route (query, path or body)."""
    as_attacker = request_credential(stack, f"attacker-{secrets.token_hex(3)}")
    theirs = {"tenant_id": victim.tenant}
    attempts = [
        knowledge.post(
            "/internal/search",
            json={**theirs, "query": "vault combination"},
            headers=as_attacker,
        ),
        knowledge.get(f"/internal/documents/{victim.doc_id}", params=theirs, headers=as_attacker),
        knowledge.get("/internal/knowledge-bases", params=theirs, headers=as_attacker),
        knowledge.post(
            "/internal/chunks",
            json={**theirs, "chunk_ids": [victim.chunk_id]},
            headers=as_attacker,
        ),
    ]
    for attempt in attempts:
        resp = await attempt
        assert resp.status_code == 403, resp.text
        assert SECRET not in resp.text


async def test_a_kb_restricted_key_reaches_only_its_bases(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    """The victim's own key limited to the other base (SPEC A-09): the secret's base is
    invisible, whether the request names it or names nothing."""
    limited = request_credential(stack, victim.tenant, kbs=[victim.other_kb])
    own = {"tenant_id": victim.tenant}
    listed = await knowledge.get("/internal/knowledge-bases", params=own, headers=limited)
    assert [kb["id"] for kb in listed.json()] == [victim.other_kb]
    for named in ([victim.secret_kb], []):
        search = await knowledge.post(
            "/internal/search",
            json={**own, "knowledge_base_ids": named, "query": "vault combination"},
            headers=limited,
        )
        assert SECRET not in search.text, named
    document = await knowledge.get(
        f"/internal/documents/{victim.doc_id}", params=own, headers=limited
    )
    assert document.status_code == 404
    by_id = await knowledge.post(
        "/internal/chunks", json={**own, "chunk_ids": [victim.chunk_id]}, headers=limited
    )
    assert by_id.json() == []
    created = await knowledge.post(
        "/internal/knowledge-bases", json={**own, "name": "escape"}, headers=limited
    )
    assert created.status_code == 403


async def test_only_the_knowledge_audience_and_its_issuers_open_the_routes(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    """No credential or another service's audience: 401. The system routes: a request
    credential is 401, another issuer's or scope's service credential 403; tool-exec's
    retrieval credential opens the reads and nothing else."""
    own = {"tenant_id": victim.tenant}
    search = {**own, "query": "vault combination"}
    assert (await knowledge.post("/internal/search", json=search)).status_code == 401
    memory_only = request_credential(stack, victim.tenant, audience=["memory"])
    resp = await knowledge.post("/internal/search", json=search, headers=memory_only)
    assert resp.status_code == 401 and SECRET not in resp.text

    lookup = {**own, "knowledge_base_ids": [victim.secret_kb]}
    as_request = request_credential(stack, victim.tenant)
    resp = await knowledge.post("/internal/knowledge-bases/lookup", json=lookup, headers=as_request)
    assert resp.status_code == 401
    folder = stack.credentials_dir
    suggestions = load_signer(folder, "suggestions").service("knowledge", ["knowledge:bases.read"])
    resp = await knowledge.post(
        "/internal/knowledge-bases/lookup", json=lookup, headers=bearer(suggestions)
    )
    assert resp.status_code == 403
    tool_exec = load_signer(folder, "tool-exec")
    retrieve = bearer(tool_exec.service("knowledge", ["knowledge:retrieve"]))
    resp = await knowledge.post("/internal/knowledge-bases/lookup", json=lookup, headers=retrieve)
    assert resp.status_code == 403
    wrong_scope = bearer(tool_exec.service("knowledge", ["knowledge:bases.read"]))
    resp = await knowledge.post("/internal/search", json=search, headers=wrong_scope)
    assert resp.status_code == 403
    resp = await knowledge.post(
        "/internal/knowledge-bases", json={**own, "name": "x"}, headers=retrieve
    )
    assert resp.status_code == 401, "a service credential opens no tenant write"

    agent_config = load_signer(folder, "agent-config")
    lookup_ok = bearer(agent_config.service("knowledge", ["knowledge:bases.read"]))
    found = await knowledge.post("/internal/knowledge-bases/lookup", json=lookup, headers=lookup_ok)
    assert found.status_code == 200 and found.json()[0]["id"] == victim.secret_kb
    shared = await knowledge.post("/internal/search", json=search, headers=retrieve)
    assert shared.status_code == 200 and "7-31-4159" in shared.text

"""The wiki's routes attacked (SPEC T-18, invariant 5, A-09): knowledge's internal wiki
routes on its port as if a credential had leaked, and the gateway's public wiki routes.
Another tenant's credential reads and changes nothing of the victim's pages and issues; a
KB-restricted key reaches only its bases' wiki; tool-exec's shared-agent credential
reads but never writes; hostile inputs (catastrophic or invalid regexes, huge pages,
path-like and oversized slugs) are a clear 4xx, never a 500 or a page somewhere else."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from weft_platform.credentials import load_signer
from weft_testkit import LocalStack

from tests.stack_fixtures import ApiKeys

SECRET = "The vault combination is 7-31-4159."


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def as_request(stack: LocalStack, tenant: str, kbs: list[str] | None = None) -> dict[str, str]:
    """What the gateway mints for a request of ``tenant`` (a key limited to ``kbs``)."""
    token = stack.credentials.gateway.request(
        tenant_id=tenant, user_id=f"u-{secrets.token_hex(3)}", knowledge_base_ids=kbs,
        audience=["knowledge"], ttl_s=300,
    )  # fmt: skip
    return bearer(token)


@dataclass(frozen=True)
class Victim:
    tenant: str
    secret_kb: str
    other_kb: str
    issue_id: str


@pytest.fixture
async def knowledge(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as client:
        yield client


async def _write(
    knowledge: httpx.AsyncClient, headers: dict[str, str], tenant: str, kb: str, **page: Any
) -> httpx.Response:
    body = {"tenant_id": tenant, "knowledge_base_ids": [kb], "slug": "vault",
            "title": "Vault", "summary": "The vault.", "content": SECRET, **page}  # fmt: skip
    return await knowledge.put("/internal/wiki/pages", json=body, headers=headers)


@pytest.fixture
async def victim(api: httpx.AsyncClient, stack: LocalStack, knowledge: httpx.AsyncClient) -> Victim:
    kbs = [
        (await api.post("/api/v1/knowledge-bases", json={"name": n, "wiki_enabled": True})).json()
        for n in ("vault", "misc")
    ]
    own = as_request(stack, stack.tenant)
    written = await _write(knowledge, own, stack.tenant, kbs[0]["id"])
    assert written.status_code == 200, written.text
    flag = {"tenant_id": stack.tenant, "knowledge_base_ids": [kbs[0]["id"]], "slug": "vault",
            "issue_type": "other", "description": SECRET}  # fmt: skip
    issue = await knowledge.post("/internal/wiki/issues/flag", json=flag, headers=own)
    assert issue.status_code == 201, issue.text
    return Victim(stack.tenant, kbs[0]["id"], kbs[1]["id"], issue.json()["id"])


async def test_another_tenant_reads_and_changes_nothing(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    attacker = f"attacker-{secrets.token_hex(3)}"
    headers, mine = as_request(stack, attacker), {"tenant_id": attacker}
    scope = {**mine, "knowledge_base_ids": [victim.secret_kb]}
    search = await knowledge.post(
        "/internal/wiki/search", json={**scope, "query": "vault"}, headers=headers
    )
    assert search.status_code == 200 and search.json()["results"] == []
    read = await knowledge.post(
        "/internal/wiki/pages/read", json={**scope, "slugs": ["vault"]}, headers=headers
    )
    assert read.json()["pages"] == [] and SECRET not in read.text
    for path, extra in (
        ("/internal/wiki/pages/rename", {"slug": "vault", "new_slug": "mine"}),
        ("/internal/wiki/pages/delete", {"slug": "vault"}),
        ("/internal/wiki/pages/replace-text", {"slug": "vault", "old_text": "7", "new_text": "8"}),
        (
            "/internal/wiki/issues/flag",
            {"slug": "vault", "issue_type": "other", "description": "x"},
        ),
    ):
        resp = await knowledge.post(path, json={**scope, **extra}, headers=headers)
        assert resp.status_code in (403, 404), (path, resp.text)
    planted = await _write(knowledge, headers, attacker, victim.secret_kb)
    assert planted.status_code == 403, planted.text  # no writable wiki of its own there
    issue = await knowledge.get(
        f"/internal/wiki/issues/{victim.issue_id}", params=mine, headers=headers
    )
    assert issue.status_code == 404
    patch = await knowledge.post(
        f"/internal/wiki/issues/{victim.issue_id}/status", json={**mine, "status": "ignored"},
        headers=headers,
    )  # fmt: skip
    assert patch.status_code == 404
    listed = await knowledge.get("/internal/wiki/issues", params=mine, headers=headers)
    assert listed.json() == []
    for tail in ("", "/pages", "/page", "/page/history"):
        resp = await knowledge.get(
            f"/internal/knowledge-bases/{victim.secret_kb}/wiki{tail}",
            params={**mine, "slug": "vault"}, headers=headers,
        )  # fmt: skip
        assert resp.status_code == 404, (tail, resp.text)

    removal = await knowledge.delete(
        f"/internal/knowledge-bases/{victim.secret_kb}/documents/doc_none", params=mine,
        headers=headers,
    )  # fmt: skip
    assert removal.status_code == 404

    theirs = {"tenant_id": victim.tenant, "query": "vault"}
    named = await knowledge.post("/internal/wiki/search", json=theirs, headers=headers)
    assert named.status_code == 403 and SECRET not in named.text
    own = as_request(stack, victim.tenant)
    page = await knowledge.post(
        "/internal/wiki/pages/read",
        json={"tenant_id": victim.tenant, "slugs": ["vault"]}, headers=own,
    )  # fmt: skip
    assert SECRET in page.text  # still there, unchanged
    issue = await knowledge.get(
        f"/internal/wiki/issues/{victim.issue_id}", params={"tenant_id": victim.tenant},
        headers=own,
    )  # fmt: skip
    assert issue.json()["status"] == "pending"


async def test_a_kb_restricted_key_reaches_only_its_wiki(
    stack: LocalStack,
    knowledge: httpx.AsyncClient,
    victim: Victim,
    api: httpx.AsyncClient,
    api_keys: ApiKeys,
) -> None:
    limited = as_request(stack, victim.tenant, kbs=[victim.other_kb])
    own = {"tenant_id": victim.tenant}
    for named in ([victim.secret_kb], []):
        body = {**own, "knowledge_base_ids": named}
        search = await knowledge.post(
            "/internal/wiki/search", json={**body, "query": "vault"}, headers=limited
        )
        assert SECRET not in search.text and "vault" not in str(search.json().get("results"))
        read = await knowledge.post(
            "/internal/wiki/pages/read", json={**body, "slugs": ["vault"]}, headers=limited
        )
        assert SECRET not in read.text
        issues = await knowledge.get(
            "/internal/wiki/issues", params={**own, "kb_id": named}, headers=limited
        )
        assert SECRET not in issues.text
    rename = await knowledge.post(
        "/internal/wiki/pages/rename",
        json={**own, "slug": "vault", "new_slug": "moved"}, headers=limited,
    )  # fmt: skip
    assert rename.status_code == 404
    issue = await knowledge.get(
        f"/internal/wiki/issues/{victim.issue_id}", params=own, headers=limited
    )
    assert issue.status_code == 404
    into_secret = await _write(knowledge, limited, victim.tenant, victim.secret_kb)
    assert into_secret.status_code == 404  # narrowed to nothing: no KB in reach

    restricted = await api_keys.client(user="user-w", knowledge_base_ids=[victim.other_kb])
    for tail in ("/wiki", "/wiki/pages", "/wiki/page?slug=vault", "/wiki/page/history?slug=vault",
                 "/wiki/issues"):  # fmt: skip
        resp = await restricted.http.get(f"/api/v1/knowledge-bases/{victim.secret_kb}{tail}")
        assert resp.status_code == 404 and SECRET not in resp.text, (tail, resp.text)
    fine = await restricted.http.get(f"/api/v1/knowledge-bases/{victim.other_kb}/wiki/pages")
    assert fine.status_code == 200 and fine.json()["total"] == 0
    traversal = await api.get(
        f"/api/v1/knowledge-bases/{victim.secret_kb}/wiki/page", params={"slug": "../vault"}
    )
    assert traversal.status_code == 422


async def test_the_shared_agent_credential_reads_but_never_writes(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    retrieve = bearer(
        load_signer(stack.credentials_dir, "tool-exec").service("knowledge", ["knowledge:retrieve"])
    )
    own = {"tenant_id": victim.tenant, "knowledge_base_ids": [victim.secret_kb]}
    read = await knowledge.post(
        "/internal/wiki/pages/read", json={**own, "slugs": ["vault"]}, headers=retrieve
    )
    assert read.status_code == 200 and SECRET in read.text
    written = await _write(knowledge, retrieve, victim.tenant, victim.secret_kb, content="x")
    assert written.status_code == 401, written.text
    deleted = await knowledge.post(
        "/internal/wiki/pages/delete", json={**own, "slug": "vault"}, headers=retrieve
    )
    assert deleted.status_code == 401
    status = await knowledge.post(
        f"/internal/wiki/issues/{victim.issue_id}/status",
        json={"tenant_id": victim.tenant, "status": "ignored"}, headers=retrieve,
    )  # fmt: skip
    assert status.status_code == 401  # the issue's read path opens no write


@pytest.mark.parametrize(
    "slug",
    ["../../etc/passwd", "/vault", "vault/", "a//b", "a\\b", "a%2f..", "x\x00y", "a" * 201,
     "a/b/c/d/e", "-vault", "vault--x", "<script>", "vault?x=1", "   "],
)  # fmt: skip
async def test_hostile_slugs_are_refused(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim, slug: str
) -> None:
    own = as_request(stack, victim.tenant)
    resp = await _write(knowledge, own, victim.tenant, victim.other_kb, slug=slug)
    assert resp.status_code == 422, resp.text
    renamed = await knowledge.post(
        "/internal/wiki/pages/rename",
        json={"tenant_id": victim.tenant, "slug": "vault", "new_slug": slug}, headers=own,
    )  # fmt: skip
    assert renamed.status_code == 422, renamed.text


async def test_hostile_patterns_and_sizes_are_clear_errors(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: Victim
) -> None:
    own = as_request(stack, victim.tenant)
    tenant = {"tenant_id": victim.tenant, "knowledge_base_ids": [victim.other_kb]}
    big = await _write(knowledge, own, victim.tenant, victim.other_kb, slug="big",
                       content="a" * 100_001)  # fmt: skip
    assert big.status_code == 422  # the page bound
    filler = await _write(knowledge, own, victim.tenant, victim.other_kb, slug="filler",
                          content="a" * 99_000 + "!")  # fmt: skip
    assert filler.status_code == 200, filler.text
    for pattern in ("(a+)+$", "(a|aa)*b", "((a*)*)*c", "(x+x+)+y", "a{1,1000}{1,1000}"):
        resp = await knowledge.post(
            "/internal/wiki/search", json={**tenant, "query": pattern, "regex": True}, headers=own
        )
        assert resp.status_code in (200, 422), (pattern, resp.text)
    invalid = await knowledge.post(
        "/internal/wiki/search", json={**tenant, "query": "a(b", "regex": True}, headers=own
    )
    assert invalid.status_code == 422 and "regular expression" in invalid.text
    fallback = await knowledge.post(
        "/internal/wiki/search", json={**tenant, "query": "a(b"}, headers=own
    )
    assert fallback.status_code == 200 and fallback.json()["mode"] == "literal"
    long_query = await knowledge.post(
        "/internal/wiki/search", json={**tenant, "query": "a" * 501}, headers=own
    )
    assert long_query.status_code == 422
    many = await knowledge.post(
        "/internal/wiki/pages/read", json={**tenant, "slugs": ["a"] * 11}, headers=own
    )
    assert many.status_code == 422
    grow = await knowledge.post(
        "/internal/wiki/pages/replace-text",
        json={**tenant, "slug": "filler", "old_text": "!", "new_text": "b" * 20_000},
        headers=own,
    )  # fmt: skip
    assert grow.status_code == 409 and "exceed" in grow.text
    bad_type = await _write(knowledge, own, victim.tenant, victim.other_kb, slug="t",
                            page_type="'; DROP TABLE wiki_pages; --")  # fmt: skip
    assert bad_type.status_code == 422
    sources = await _write(knowledge, own, victim.tenant, victim.other_kb, slug="s",
                           source_refs=[{"document_id": "doc_not_ours"}])  # fmt: skip
    assert sources.status_code == 404

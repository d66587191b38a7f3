"""The knowledge scope guard of KB-restricted API keys (SPEC A-09), without infrastructure:
the rules, the guard on every route of the knowledge router (a fake knowledge service
behind it records every write), and ``seal`` refusing a route that would escape the
guard."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.knowledge import DocumentInfo
from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.knowledge_api import knowledge_router
from weft_gateway.knowledge_client import KnowledgeClient
from weft_gateway.knowledge_scope import (
    KnowledgeScope,
    key_reaches,
    refuse_restricted_create,
    seal,
    visible_to,
)

TENANT = "t1"
KB_A, KB_B = "kb_a", "kb_b"
DOC_A, DOC_B = "doc_a", "doc_b"
RESTRICTED = Principal(tenant_id=TENANT, user_id="u1", knowledge_base_ids=[KB_A])
UNRESTRICTED = Principal(tenant_id=TENANT, user_id="u1")


@dataclass
class FakeKnowledge:
    """Stands for the knowledge service of one tenant with two KBs of one document each
    (its lookups, and its internal routes through :meth:`handle`); records every call
    that would write."""

    writes: list[str] = field(default_factory=list)
    existence_checks: list[str] = field(default_factory=list)
    homes: dict[str, str] = field(default_factory=lambda: {DOC_A: KB_A, DOC_B: KB_B})

    async def knowledge_base_exists(self, tenant_id: str, kb_id: str) -> bool:
        self.existence_checks.append(kb_id)
        return tenant_id == TENANT and kb_id in (KB_A, KB_B)

    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None:
        return self.homes.get(doc_id) if tenant_id == TENANT else None

    def handle(self, request: httpx.Request) -> httpx.Response:
        """knowledge's internal routes as the gateway calls them."""
        path, params = request.url.path, request.url.params
        kb_ids = params.get_list("kb_id")
        if request.method == "POST" and path == "/internal/knowledge-bases":
            self.writes.append(f"create {json.loads(request.content)['name']}")
            return httpx.Response(201, json={"id": "kb_new", "name": "n"})
        if request.method == "PATCH":
            self.writes.append(f"switch {path.rsplit('/', 1)[1]}")
            return httpx.Response(200, json={"id": path.rsplit("/", 1)[1]})
        if request.method == "GET" and path == "/internal/knowledge-bases":
            return httpx.Response(200, json=[{"id": kb, "name": kb} for kb in (KB_A, KB_B)])
        if request.method == "POST" and path.endswith("/documents"):
            kb_id = path.split("/")[3]
            self.writes.append(f"queued in {kb_id}")
            self.homes["doc_new"] = kb_id  # ingested at once
            return httpx.Response(200, json=asdict(self._info("doc_new")))
        if request.method == "POST" and path.endswith("/files"):
            kb_id = path.split("/")[3]
            self.writes.append(f"queued in {kb_id}")
            return httpx.Response(202, json={"id": "doc_new", "knowledge_base_id": kb_id})
        if path == "/internal/documents":
            docs = [asdict(self._info(d)) for d, kb in self.homes.items() if kb in kb_ids]
            return httpx.Response(200, json={"total": len(docs), "items": docs})
        doc_id = path.rsplit("/", 1)[1]
        if self.homes.get(doc_id) in kb_ids:
            return httpx.Response(200, json=asdict(self._info(doc_id)))
        return httpx.Response(404, json={"detail": f"document {doc_id!r} not found"})

    def _info(self, doc_id: str) -> DocumentInfo:
        return DocumentInfo(
            id=doc_id, knowledge_base_id=self.homes[doc_id], title=doc_id, file_name="",
            status="ready", chunk_count=1, embedded_count=1, error=None,
        )  # fmt: skip


@dataclass
class Caller:
    """Who the overridden auth says is calling."""

    who: Principal = RESTRICTED


@pytest.fixture
def fake() -> FakeKnowledge:
    return FakeKnowledge()


@pytest.fixture
def caller() -> Caller:
    return Caller()


@pytest.fixture
async def client(fake: FakeKnowledge, caller: Caller) -> AsyncIterator[httpx.AsyncClient]:
    auth = ApiKeyAuth(cast(async_sessionmaker[AsyncSession], None))
    service = KnowledgeClient(
        "http://knowledge", "knowledge", transport=httpx.MockTransport(fake.handle)
    )
    router = knowledge_router(service, auth, KnowledgeScope(fake, fake))
    app = FastAPI()
    app.include_router(router)
    app.dependency_overrides[auth] = lambda: caller.who
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        yield c


# SPEC A-09
def test_a_key_reaches_only_its_knowledge_bases() -> None:
    assert key_reaches(RESTRICTED, KB_A) and not key_reaches(RESTRICTED, KB_B)
    assert key_reaches(UNRESTRICTED, KB_B)
    empty = Principal(tenant_id=TENANT, user_id="u1", knowledge_base_ids=[])
    assert not key_reaches(empty, KB_A)  # an empty list is no KB, never "every KB"
    kbs = [{"id": KB_A}, {"id": KB_B}]
    assert visible_to(RESTRICTED, kbs) == [{"id": KB_A}]
    assert visible_to(UNRESTRICTED, kbs) == kbs
    assert visible_to(empty, kbs) == []


# SPEC A-09
def test_a_restricted_key_cannot_create_a_knowledge_base() -> None:
    refuse_restricted_create(UNRESTRICTED)
    with pytest.raises(HTTPException) as refused:
        refuse_restricted_create(RESTRICTED)
    assert refused.value.status_code == 403
    assert "cannot create" in str(refused.value.detail)


# SPEC A-09
async def test_require_answers_out_of_scope_like_missing(fake: FakeKnowledge) -> None:
    scope = KnowledgeScope(fake, fake)
    with pytest.raises(HTTPException) as out_of_scope:
        await scope.require(RESTRICTED, KB_B)
    assert fake.existence_checks == []  # the key is checked before any query
    with pytest.raises(HTTPException) as missing:
        await scope.require(UNRESTRICTED, "kb_missing")
    assert out_of_scope.value.status_code == missing.value.status_code == 404
    assert out_of_scope.value.detail == f"knowledge base {KB_B!r} not found"
    await scope.require(RESTRICTED, KB_A)
    await scope.require(UNRESTRICTED, KB_B)
    with pytest.raises(HTTPException):
        await scope.require_all(RESTRICTED, [KB_A, KB_B])


# SPEC A-09
async def test_require_document_checks_the_documents_own_knowledge_base(
    fake: FakeKnowledge,
) -> None:
    scope = KnowledgeScope(fake, fake)
    await scope.require_document(RESTRICTED, DOC_A, KB_A)
    await scope.require_document(RESTRICTED, DOC_A, None)
    for who, doc, kb in (
        (RESTRICTED, DOC_B, None),  # addressed by document id alone
        (RESTRICTED, DOC_B, KB_A),  # a reachable KB in the path, the document elsewhere
        (UNRESTRICTED, DOC_B, KB_A),  # the path's KB must hold the document
        (UNRESTRICTED, "doc_missing", None),
    ):
        with pytest.raises(HTTPException) as refused:
            await scope.require_document(who, doc, kb)
        assert refused.value.status_code == 404
        assert refused.value.detail == f"document {doc!r} not found"


# SPEC A-09
async def test_every_knowledge_route_refuses_a_kb_outside_the_key(
    client: httpx.AsyncClient, fake: FakeKnowledge
) -> None:
    """Each route on KB B with a key limited to KB A: 404 and nothing written."""
    files = {"file": ("a.txt", b"text", "text/plain")}
    doc = {"json": {"title": "t", "content": "c"}}
    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", f"/api/v1/knowledge-bases/{KB_B}/documents", doc),
        ("POST", f"/api/v1/knowledge-bases/{KB_B}/files", {"files": files}),
        ("GET", f"/api/v1/knowledge-bases/{KB_B}/documents", {}),
        ("GET", f"/api/v1/knowledge-bases/{KB_B}/documents/{DOC_B}", {}),
        ("GET", f"/api/v1/knowledge-bases/{KB_A}/documents/{DOC_B}", {}),
    ]  # fmt: skip
    for method, url, kwargs in attempts:
        resp = await client.request(method, url, **kwargs)
        assert resp.status_code == 404, (method, url, resp.text)
        assert "not found" in resp.json()["detail"]
    assert fake.writes == []
    listed = await client.get("/api/v1/knowledge-bases")
    assert [kb["id"] for kb in listed.json()] == [KB_A]
    created = await client.post("/api/v1/knowledge-bases", json={"name": "mine"})
    assert created.status_code == 403
    assert fake.writes == []
    # ... while the key's own KB works.
    own = await client.post(
        f"/api/v1/knowledge-bases/{KB_A}/documents", json={"title": "t", "content": "c"}
    )
    assert own.status_code == 201 and fake.writes == [f"queued in {KB_A}"]
    assert (await client.get(f"/api/v1/knowledge-bases/{KB_A}/documents/{DOC_A}")).is_success


# SPEC A-09
async def test_an_unrestricted_key_reaches_every_kb_of_its_tenant(
    client: httpx.AsyncClient, fake: FakeKnowledge, caller: Caller
) -> None:
    caller.who = UNRESTRICTED
    assert len((await client.get("/api/v1/knowledge-bases")).json()) == 2
    assert (await client.get(f"/api/v1/knowledge-bases/{KB_B}/documents/{DOC_B}")).is_success
    assert (await client.post("/api/v1/knowledge-bases", json={"name": "n"})).status_code == 201
    missing = await client.get("/api/v1/knowledge-bases/kb_missing/documents")
    assert missing.status_code == 404


def test_seal_refuses_a_route_that_escapes_the_guard(fake: FakeKnowledge) -> None:
    """A new route cannot forget the check: outside the guard, or naming an id the guard
    does not know, it stops the app from being built."""
    guard = KnowledgeScope(fake, fake).guard(ApiKeyAuth(cast(Any, None)))

    async def handler() -> None:
        return None

    unguarded = APIRouter()
    unguarded.add_api_route("/knowledge-bases/{kb_id}/tags", handler)
    with pytest.raises(RuntimeError, match="not behind the knowledge scope guard"):
        seal(unguarded, guard)
    unknown_id = APIRouter(dependencies=[Depends(guard)])
    unknown_id.add_api_route("/knowledge-bases/{knowledge_base_id}/tags", handler)
    with pytest.raises(RuntimeError, match="knowledge_base_id"):
        seal(unknown_id, guard)
    fine = APIRouter(dependencies=[Depends(guard)])
    fine.add_api_route("/knowledge-bases/{kb_id}/tags", handler)
    assert seal(fine, guard) is fine


# SPEC A-09, T-18: the switches spend the whole tenant's model budget
async def test_a_restricted_key_switches_nothing_even_in_its_own_kb(
    client: httpx.AsyncClient, fake: FakeKnowledge, caller: Caller
) -> None:
    resp = await client.patch(f"/api/v1/knowledge-bases/{KB_A}", json={"wiki_enabled": True})
    assert resp.status_code == 403, resp.text
    assert fake.writes == []  # refused at the gateway, before knowledge is asked
    caller.who = UNRESTRICTED
    resp = await client.patch(f"/api/v1/knowledge-bases/{KB_B}", json={"graph_enabled": True})
    assert resp.status_code == 200, resp.text
    assert fake.writes == [f"switch {KB_B}"]

"""Hostile inputs on the routes and bodies issue 39's FAQ embedding queue and mention
bounds changed (SPEC A-11, C-04): the new ``POST /internal/documents/listing``, the
``faq_tags`` of a search, the ``user_id`` of FAQ writes and imports, and another tenant's
FAQ tags and documents named in a mention. Knowledge's routes run in-process on the real
PostgreSQL (the Kit of ``tests/integration/test_faq_knowledge.py``)."""

from __future__ import annotations

import secrets

import pytest
from weft_knowledge.faq_embedding import FaqEmbedder, FaqEmbeddingSettings

from tests.integration.test_faq_knowledge import (
    FAQ_CSV,
    Kit,
    ScriptedEmbedder,
    _faq_kb,
    _plans,
    kit,
    redis,
)

__all__ = ["kit", "redis"]  # the fixtures this module uses


@pytest.mark.parametrize(
    "body",
    [
        {"document_ids": ["d"] * 501},
        {"document_ids": ["x" * 65]},
        {"document_ids": [], "page": 0},
        {"document_ids": [], "size": 101},
        {"document_ids": [], "keyword": "k" * 201},
        {"document_ids": [], "knowledge_base_ids": ["b"] * 101},
        {"document_ids": [], "tenant_id_extra": "t"},
        {},
    ],
)
async def test_a_hostile_listing_body_is_refused(kit: Kit, body: dict[str, object]) -> None:
    sent = await kit.http.post(
        "/internal/documents/listing", json={"tenant_id": kit.tenant, **body}
    )
    assert sent.status_code == 422, sent.text


async def test_a_listing_never_shows_another_tenants_document(kit: Kit) -> None:
    _, _, pro = await _plans(kit)
    other = f"t-{secrets.token_hex(4)}"
    body = {"tenant_id": other, "document_ids": [pro]}
    listed = await kit.http.post("/internal/documents/listing", json=body)
    assert listed.status_code == 200 and listed.json() == {"total": 0, "items": []}


@pytest.mark.parametrize("tags", [["../etc"], ["a b"], ["t"] * 21, ["x" * 65], [""]])
async def test_hostile_faq_tags_of_a_search_are_refused(kit: Kit, tags: list[str]) -> None:
    body = {"tenant_id": kit.tenant, "query": "q", "faq_tags": tags}
    assert (await kit.http.post("/internal/search", json=body)).status_code == 422


async def test_an_oversized_user_of_an_faq_write_is_refused(kit: Kit) -> None:
    kb = await _faq_kb(kit)
    entry = {"tenant_id": kit.tenant, "question": "q", "answer": "a", "user_id": "u" * 129}
    made = await kit.http.post(f"/internal/knowledge-bases/{kb}/faq/entries", json=entry)
    assert made.status_code == 422
    imported = await kit.http.post(
        f"/internal/knowledge-bases/{kb}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "f.csv", "user_id": "u" * 129},
        content=FAQ_CSV,
    )  # fmt: skip
    assert imported.status_code == 422
    assert (await kit.http.get(f"/internal/knowledge-bases/{kb}", params={"tenant_id": kit.tenant})
            ).json()["faq"]["entries"] == 2  # fmt: skip


async def test_another_tenants_faq_tag_is_never_a_target(kit: Kit) -> None:
    await _faq_kb(kit)  # this tenant's entries carry "support" and "account"
    other = f"t-{secrets.token_hex(4)}"
    body = {"tenant_id": other, "tags": ["support"]}
    found = await kit.http.post("/internal/search-targets", json=body)
    assert found.status_code == 422 and "support" in found.text
    searched = await kit.http.post(
        "/internal/search",
        json={"tenant_id": other, "query": "support hours", "faq_tags": ["support"],
              "mode": "keyword"},
    )  # fmt: skip
    assert searched.status_code == 409  # nothing of the other tenant's is in scope


async def test_an_embedding_worker_of_one_tenant_never_takes_anothers_job(kit: Kit) -> None:
    kb = await _faq_kb(kit)  # drained by this tenant's worker
    await kit.http.post(
        f"/internal/knowledge-bases/{kb}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "f.csv"}, content=FAQ_CSV,
    )  # fmt: skip
    settings = FaqEmbeddingSettings(tenants=(f"t-{secrets.token_hex(4)}",))
    worker = FaqEmbedder(kit.jobs, ScriptedEmbedder(), kit.usage, settings)
    assert not await worker.embed_next()
    view = (await kit.http.get(f"/internal/knowledge-bases/{kb}",
                               params={"tenant_id": kit.tenant})).json()["faq"]  # fmt: skip
    assert view["jobs"]["pending"] == 1

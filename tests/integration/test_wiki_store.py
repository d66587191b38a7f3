"""The wiki's pages and issues on the real PostgreSQL (SPEC T-18): writes keep revisions
and links, renames and deletes keep the other pages' links consistent, search matches by
regex or literally, and every call stays in its tenant and knowledge bases."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import (
    InvalidPattern,
    NotWritable,
    PageDraft,
    PageNotFound,
    WikiConflict,
    WikiPages,
)
from weft_storage.knowledge.wiki_issues import WikiIssues


def draft(slug: str, content: str, **kw: object) -> PageDraft:
    fields: dict[str, object] = {
        "title": slug.replace("-", " ").title(), "summary": f"About {slug}.",
        "page_type": "concept", **kw,
    }  # fmt: skip
    return PageDraft(slug=slug, content=content, **fields)  # type: ignore[arg-type]


async def wiki_kb(store: KnowledgeStore, tenant: str, *, wiki: bool = True) -> str:
    return await store.create_knowledge_base(tenant, "wiki", wiki_enabled=wiki)


async def test_rename_and_delete_keep_links_consistent(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store, pages = KnowledgeStore(sessions), WikiPages(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await wiki_kb(store, tenant)
    await pages.write(tenant, kb, draft("stardust", "Stardust is a probe."), "agent")
    await pages.write(
        tenant, kb, draft("missions", "See [[stardust]] and [[Stardust|the probe]]."), "agent"
    )
    (viewed,) = await pages.read(tenant, [kb], ["stardust"])
    assert [p.slug for p in viewed.incoming] == ["missions"]

    renamed = await pages.rename(tenant, [kb], "stardust", "stardust-probe", "agent")
    assert renamed.relinked == ["missions"]
    (missions,) = await pages.read(tenant, [kb], ["missions"])
    assert missions.content == "See [[stardust-probe]] and [[stardust-probe|the probe]]."
    assert [p.slug for p in missions.outgoing] == ["stardust-probe"]
    assert missions.outgoing[0].exists and missions.revision == 2
    assert await pages.read(tenant, [kb], ["stardust"]) == []

    deleted = await pages.delete(tenant, [kb], "stardust-probe", "agent")
    assert deleted.relinked == ["missions"]
    (missions,) = await pages.read(tenant, [kb], ["missions"])
    assert missions.content == "See Stardust and the probe."
    assert missions.outgoing == []
    history = await pages.history(tenant, kb, "missions")
    assert [h["change"] for h in history] == ["link_removed", "link_renamed", "created"]


async def test_search_regex_literal_and_per_kb_limit(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store, pages = KnowledgeStore(sessions), WikiPages(sessions)
    tenant, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    kb1, kb2 = await wiki_kb(store, tenant), await wiki_kb(store, tenant)
    other_kb = await wiki_kb(store, other)
    for i in range(4):
        await pages.write(tenant, kb1, draft(f"page-{i}", f"Skyvault note {i}."), "agent")
    await pages.write(tenant, kb2, draft("cpp", "Written in C++ mostly."), "agent")
    await pages.write(other, other_kb, draft("secret", "Skyvault secret of another tenant."), "x")

    hits = await pages.search(tenant, [], "stardust|skyvault", regex=True, limit=2)
    assert [(h.knowledge_base_id, h.slug) for h in hits] == [(kb1, "page-0"), (kb1, "page-1")]
    assert all(h.matched_in == "content" for h in hits)
    literal = await pages.search(tenant, [], "c++", regex=False, limit=10)
    assert [h.slug for h in literal] == ["cpp"]
    with pytest.raises(InvalidPattern):
        await pages.search(tenant, [], "c++", regex=True, limit=10)
    assert await pages.search(tenant, [other_kb], "secret", regex=False, limit=10) == []
    assert await pages.search(tenant, [], "100%_", regex=False, limit=10) == []


async def test_writes_need_a_wiki_kb_and_exact_text(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store, pages, issues = KnowledgeStore(sessions), WikiPages(sessions), WikiIssues(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    plain = await wiki_kb(store, tenant, wiki=False)
    with pytest.raises(NotWritable):
        await pages.writable_kb(tenant, [plain], None, "x")
    kb = await wiki_kb(store, tenant)
    assert await pages.writable_kb(tenant, [plain, kb], None, "x") == kb
    await pages.write(tenant, kb, draft("a", "one two two"), "agent")
    with pytest.raises(WikiConflict, match="occurs 2 times"):
        await pages.replace_text(tenant, [kb], "a", "two", "three", [], "agent")
    changed = await pages.replace_text(
        tenant, [kb], "a", "one", "uno", [{"document_id": "doc_1"}], "agent"
    )
    assert changed.revision == 2
    assert await pages.citing(tenant, "doc_1") == [(changed.id, kb, "a")]
    with pytest.raises(NotWritable):  # not "every KB": a KB without a wiki reaches none
        await pages.replace_text(tenant, [plain], "a", "uno", "x", [], "agent")
    with pytest.raises(PageNotFound):
        await pages.delete(tenant, [kb], "missing", "agent")

    issue = await issues.flag(tenant, kb, "a", "out_of_date", "stale", ["doc_1"], "agent")
    await pages.rename(tenant, [kb], "a", "b", "agent")
    (moved,) = await issues.for_page(tenant, [kb], "b", "pending")
    assert moved.id == issue.id
    done = await issues.set_status(tenant, [kb], issue.id, "resolved")
    assert done is not None and done.status == "resolved"
    assert await issues.get(tenant, [plain], issue.id) is None
    assert await issues.get(f"t-{secrets.token_hex(4)}", [], issue.id) is None


async def test_deleting_a_document_flags_the_pages_citing_it(engine: AsyncEngine) -> None:
    """SPEC T-18: a page loses a deleted source and gets an out_of_date issue naming it,
    in the transaction that deletes the document; another tenant cannot delete it."""
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store, pages, issues = KnowledgeStore(sessions), WikiPages(sessions), WikiIssues(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await wiki_kb(store, tenant)
    doc, _ = await store.add_document(tenant, kb, "Mission notes", "Stardust returned dust.")
    keep, _ = await store.add_document(tenant, kb, "Other notes", "Skyvault builds probes.")
    refs = [{"document_id": doc}, {"document_id": keep}]
    await pages.write(tenant, kb, draft("stardust", "Dust.", source_refs=refs), "ingestion")
    await pages.write(tenant, kb, draft("other", "Probes.", source_refs=refs[1:]), "ingestion")

    assert await pages.forget_document(f"t-{secrets.token_hex(4)}", doc) is None
    assert await pages.forget_document(tenant, doc) == ["stardust"]
    (page,) = await pages.read(tenant, [kb], ["stardust"])
    assert page.source_refs == [{"document_id": keep}] and page.revision == 2
    (issue,) = await issues.for_page(tenant, [kb], "stardust", "pending")
    assert issue.issue_type == "out_of_date" and issue.suspected_knowledge_ids == [doc]
    assert "Mission notes" in issue.description
    assert await issues.for_page(tenant, [kb], "other", None) == []
    assert await pages.forget_document(tenant, doc) is None  # gone

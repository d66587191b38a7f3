"""KnowledgeStore on the real PostgreSQL: keyword search, scoped by tenant and KB."""

from __future__ import annotations

import secrets

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_storage.knowledge.store import KnowledgeStore


async def test_keyword_search_ranks_and_stays_in_tenant(engine: AsyncEngine) -> None:
    store = KnowledgeStore(async_sessionmaker(engine))
    tenant, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "docs")
    other_kb = await store.create_knowledge_base(other, "docs")
    await store.add_document(tenant, kb, "Refunds", "Annual plans are refunded within 30 days.")
    await store.add_document(tenant, kb, "Security", "Data is encrypted with AES-256 at rest.")
    await store.add_document(other, other_kb, "Refunds", "Other tenant refund secret.")

    hits = await store.keyword_search(tenant, [], "how are refunds handled for annual plans?")
    assert [h.title for h in hits] == ["Refunds"]
    assert hits[0].knowledge_base_id == kb and hits[0].score > 0

    scoped = await store.keyword_search(tenant, [other_kb], "refund")
    assert scoped == []  # another tenant's KB id gives nothing (invariant 5)
    assert await store.keyword_search(tenant, [kb], "'); DROP TABLE chunks; --") == []
    assert not await store.knowledge_base_exists(tenant, other_kb)


async def test_chunks_with_every_word_rank_before_chunks_with_some(engine: AsyncEngine) -> None:
    """SPEC T-07 keyword mode: all words first (websearch syntax), any word as a fallback."""
    store = KnowledgeStore(async_sessionmaker(engine))
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "docs")
    # "invoice" many times scores high on its own; only one chunk has both words.
    await store.add_document(tenant, kb, "Invoices", "Invoice invoice invoice: invoice dates.")
    await store.add_document(tenant, kb, "Both", "A refund is shown on the next invoice.")
    await store.add_document(tenant, kb, "Refunds", "Refunds take five days.")
    await store.add_document(tenant, kb, "Unrelated", "Backups run nightly.")

    hits = await store.keyword_search(tenant, [kb], "refund invoice", limit=5)
    assert hits[0].title == "Both"
    assert {h.title for h in hits[1:]} == {"Invoices", "Refunds"}  # fallback: any word
    assert len({h.chunk_id for h in hits}) == len(hits)  # no chunk twice across passes

    only = await store.keyword_search(tenant, [kb], "refund invoice", limit=1)
    assert [h.title for h in only] == ["Both"]  # enough all-word hits: no fallback
    phrase = await store.keyword_search(tenant, [kb], '"next invoice"', limit=5)
    assert phrase[0].title == "Both"  # the phrase match leads, the fallback follows
    assert await store.keyword_search(tenant, [kb], "the of and", limit=5) == []  # stop words

"""ORM models of the wiki (migration ``0024_wiki``, SPEC T-18): pages, their revisions,
the links between them, the issues flagged on them, and the generation queue.

A page is named by its slug, unique in its knowledge base. Links are kept by target
slug (``[[slug]]`` in a page's content), so a link may point at a page not written yet;
a page's incoming links are the links whose target is its slug. ``search_text`` is the
page's slug, title, aliases, summary and content in one lower-cased column, written with
the page, under a trigram index that serves both regex and literal searches.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base


class WikiPage(Base):
    """One wiki page of a knowledge base."""

    __tablename__ = "wiki_pages"
    __table_args__ = (
        UniqueConstraint("knowledge_base_id", "slug", name="uq_wiki_pages_kb_slug"),
        Index(
            "ix_wiki_pages_search_trgm",
            "search_text",
            postgresql_using="gin",
            postgresql_ops={"search_text": "gin_trgm_ops"},
        ),
        Index("ix_wiki_pages_sources", "source_document_ids", postgresql_using="gin"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True
    )
    slug: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(300))
    summary: Mapped[str] = mapped_column(Text, default="")
    content: Mapped[str] = mapped_column(Text, default="")
    page_type: Mapped[str] = mapped_column(String(40), default="concept")
    aliases: Mapped[list[str]] = mapped_column(ARRAY(String(200)), default=list)
    source_refs: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)
    """``[{"document_id": ..., "chunk_id": ...?}]``: what the page was written from."""
    source_document_ids: Mapped[list[str]] = mapped_column(ARRAY(String(64)), default=list)
    """The documents of ``source_refs`` (GIN-indexed: the pages citing a document)."""
    search_text: Mapped[str] = mapped_column(Text, default="")
    revision: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WikiPageRevision(Base):
    """A page as one change left it (its history)."""

    __tablename__ = "wiki_page_revisions"
    __table_args__ = (UniqueConstraint("page_id", "revision", name="uq_wiki_revisions_page"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64), index=True)
    page_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("wiki_pages.id", ondelete="CASCADE"), index=True
    )
    revision: Mapped[int] = mapped_column(Integer)
    slug: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(300))
    summary: Mapped[str] = mapped_column(Text, default="")
    content: Mapped[str] = mapped_column(Text, default="")
    change: Mapped[str] = mapped_column(String(40))
    """created, replaced, text_replaced, renamed, link_renamed, link_removed, source_removed"""
    author: Mapped[str] = mapped_column(String(64), default="")
    """Who changed it: ``ingestion``, ``agent`` or ``api`` (never a person's id)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WikiLink(Base):
    """A link written in a page's content (``[[to_slug]]``)."""

    __tablename__ = "wiki_links"
    __table_args__ = (Index("ix_wiki_links_target", "knowledge_base_id", "to_slug"),)
    from_page_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("wiki_pages.id", ondelete="CASCADE"), primary_key=True
    )
    to_slug: Mapped[str] = mapped_column(String(200), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64))


class WikiIssue(Base):
    """A problem flagged on a page (SPEC T-18 ``wiki_flag_issue``)."""

    __tablename__ = "wiki_issues"
    __table_args__ = (Index("ix_wiki_issues_kb_slug", "knowledge_base_id", "slug", "status"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("knowledge_bases.id", ondelete="CASCADE")
    )
    slug: Mapped[str] = mapped_column(String(200))
    issue_type: Mapped[str] = mapped_column(String(40))
    description: Mapped[str] = mapped_column(Text)
    suspected_knowledge_ids: Mapped[list[str]] = mapped_column(ARRAY(String(64)), default=list)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    reported_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WikiGeneration(Base):
    """A ready document of a wiki knowledge base waiting for (or done with) its pages."""

    __tablename__ = "wiki_generations"
    __table_args__ = (Index("ix_wiki_generations_status", "status", "next_attempt_at"),)
    document_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(String(128), index=True)
    knowledge_base_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    """pending, paused (its tenant over budget), generating, done, failed"""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    pages: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

"""Wiki pages of knowledge bases in PostgreSQL (SPEC T-18): search, read, write, replace,
rename, delete, with their revisions and links kept consistent.

Every call names the tenant and the knowledge bases it may reach (empty: all the
tenant's); a page outside them is the :class:`PageNotFound` of a missing one (invariant
5). A change to a page writes the page's next revision in the same transaction; a rename
rewrites the links of the pages pointing at the old slug, a delete turns them into plain
text, each such page getting a revision of its own.

Search matches the pages' ``search_text`` (slug, title, aliases, summary, content) with a
PostgreSQL regular expression (``~*``, case-insensitive) or a literal ``ILIKE``, both
served by the trigram index, under a statement timeout: a pattern too costly to run is
refused rather than allowed to hold a connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, case, delete, func, or_, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID

from weft_storage.knowledge.models import Document, KnowledgeBase
from weft_storage.knowledge.models_wiki import WikiIssue, WikiLink, WikiPage, WikiPageRevision
from weft_storage.knowledge.wiki_text import linked_slugs, relink, search_text

SEARCH_TIMEOUT_MS = 3000
"""Longest a ``wiki_search`` statement may run."""
SEARCH_CANDIDATES = 500
"""Matches ranked at most per knowledge base searched (see :meth:`WikiPages.search`)."""
INDEX_SLUG = "index"
"""``wiki_read_page`` of this slug (when no page has it) is the table of contents."""
INDEX_PER_TYPE = 20


class WikiError(Exception):
    """Base of the wiki's refusals; ``str()`` is safe to show a caller or a model."""


class PageNotFound(WikiError):
    """No page of that slug in reach (or no such knowledge base)."""


class WikiConflict(WikiError):
    """The change collides with the wiki as it is (slug taken, text not found once)."""


class NotWritable(WikiError):
    """No knowledge base in reach takes wiki writes (none has its wiki enabled)."""


class InvalidPattern(WikiError):
    """A search pattern PostgreSQL refuses, or too costly to run."""


@dataclass(frozen=True, kw_only=True)
class PageDraft:
    """What ``wiki_write_page`` writes."""

    slug: str
    title: str
    summary: str
    content: str
    page_type: str
    aliases: list[str] = field(default_factory=list)
    source_refs: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PageHit:
    """A page found by a search (no content)."""

    id: str
    knowledge_base_id: str
    slug: str
    title: str
    summary: str
    page_type: str
    matched_in: str


@dataclass(frozen=True, kw_only=True)
class LinkedPage:
    """A page at the other end of a link (``exists`` False: a link to no page yet)."""

    slug: str
    id: str | None = None
    title: str = ""
    summary: str = ""
    exists: bool = True


@dataclass(frozen=True, kw_only=True)
class PageView:
    """A page as ``wiki_read_page`` and the public API show it."""

    id: str
    knowledge_base_id: str
    slug: str
    title: str
    summary: str
    content: str
    page_type: str
    aliases: list[str]
    source_refs: list[dict[str, Any]]
    revision: int
    updated_at: str
    outgoing: list[LinkedPage] = field(default_factory=list)
    incoming: list[LinkedPage] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PageChange:
    """The outcome of a write: the page's slug, KB, revision, and the other pages whose
    links the change rewrote."""

    id: str
    knowledge_base_id: str
    slug: str
    revision: int
    created: bool = False
    relinked: list[str] = field(default_factory=list)


def _scoped(column: Any, tenant_column: Any, tenant_id: str, kb_ids: Sequence[str]) -> Any:
    cond = tenant_column == tenant_id
    return and_(cond, column.in_(list(kb_ids))) if kb_ids else cond


class WikiPages:
    """The wiki pages of a tenant's knowledge bases."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    # -- reads ---------------------------------------------------------------------------

    async def search(
        self, tenant_id: str, kb_ids: Sequence[str], pattern: str, *, regex: bool, limit: int
    ) -> list[PageHit]:
        """At most ``limit`` pages per knowledge base matching ``pattern``: title or slug
        matches first, then aliases, summary, content; by slug within each. Of a pattern
        most pages match, the first :data:`SEARCH_CANDIDATES` matches per KB are ranked."""
        p = WikiPage
        if regex:
            hit: Any = lambda col: col.op("~*")(pattern)  # noqa: E731
        else:
            like = (
                "%"
                + pattern.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                + "%"
            )
            hit = lambda col: col.ilike(like, escape="\\")  # noqa: E731
        aliases = func.array_to_string(p.aliases, "\n")
        rank = (
            select(
                p.id,
                p.knowledge_base_id,
                p.slug,
                p.title,
                p.summary,
                p.page_type,
                _rank(hit, p, aliases).label("rank"),
            )
            .where(_scoped(p.knowledge_base_id, p.tenant_id, tenant_id, kb_ids))
            .where(hit(p.search_text))
            # Bounds the ranking work of a pattern most pages match (a common word): at
            # most this many matches per KB in reach are ranked.
            .limit(SEARCH_CANDIDATES * max(1, len(kb_ids)))
            .subquery()
        )
        numbered = select(
            rank,
            func.row_number()
            .over(partition_by=rank.c.knowledge_base_id, order_by=(rank.c.rank, rank.c.slug))
            .label("n"),
        ).subquery()
        stmt = (
            select(numbered)
            .where(numbered.c.n <= limit)
            .order_by(numbered.c.knowledge_base_id, numbered.c.n)
        )
        try:
            async with self._sessions.begin() as s:
                await s.execute(text(f"SET LOCAL statement_timeout = {SEARCH_TIMEOUT_MS}"))
                # A generic plan of a prepared ``~* $1`` cannot use the trigram index (it
                # needs the pattern's trigrams): plan each search for its pattern.
                await s.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
                rows = (await s.execute(stmt)).all()
        except DBAPIError as exc:
            raise _pattern_error(exc) from None
        places = ("title", "aliases", "summary", "content")
        return [
            PageHit(
                id=r.id,
                knowledge_base_id=r.knowledge_base_id,
                slug=r.slug,
                title=r.title,
                summary=r.summary,
                page_type=r.page_type,
                matched_in=places[r.rank],
            )
            for r in rows
        ]

    async def read(
        self, tenant_id: str, kb_ids: Sequence[str], slugs: Sequence[str]
    ) -> list[PageView]:
        """The pages named (in that order; a slug in several KBs: the first KB's in
        ``kb_ids`` order, else the oldest KB's), with their links; missing ones left out."""
        async with self._sessions() as s:
            found: list[PageView] = []
            for slug in dict.fromkeys(slugs):
                page = await _find(s, tenant_id, kb_ids, slug)
                if page is not None:
                    found.append(await _view(s, page))
        return found

    async def index(self, tenant_id: str, kb_ids: Sequence[str]) -> dict[str, list[dict[str, str]]]:
        """The table of contents: page type -> its :data:`INDEX_PER_TYPE` first pages."""
        p = WikiPage
        n = func.row_number().over(partition_by=p.page_type, order_by=p.slug).label("n")
        inner = (
            select(p.page_type, p.slug, p.title, p.knowledge_base_id, n)
            .where(_scoped(p.knowledge_base_id, p.tenant_id, tenant_id, kb_ids))
            .subquery()
        )
        stmt = (
            select(inner).where(inner.c.n <= INDEX_PER_TYPE).order_by(inner.c.page_type, inner.c.n)
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        out: dict[str, list[dict[str, str]]] = {}
        for r in rows:
            out.setdefault(r.page_type, []).append(
                {"slug": r.slug, "title": r.title, "knowledge_base_id": r.knowledge_base_id}
            )
        return out

    async def list_pages(
        self, tenant_id: str, kb_id: str, *, page: int, size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """(total, one page of the KB's pages by slug) without their content."""
        p = WikiPage
        cond = and_(p.tenant_id == tenant_id, p.knowledge_base_id == kb_id)
        stmt = (
            select(p.id, p.slug, p.title, p.summary, p.page_type, p.revision, p.updated_at)
            .where(cond)
            .order_by(p.slug)
            .offset((page - 1) * size)
            .limit(size)
        )
        async with self._sessions() as s:
            total = int(await s.scalar(select(func.count()).select_from(p).where(cond)) or 0)
            rows = (await s.execute(stmt)).all()
        items = [
            {
                "id": r.id,
                "slug": r.slug,
                "title": r.title,
                "summary": r.summary,
                "page_type": r.page_type,
                "revision": r.revision,
                "updated_at": r.updated_at.isoformat(),
            }
            for r in rows
        ]
        return total, items

    async def history(self, tenant_id: str, kb_id: str, slug: str) -> list[dict[str, Any]]:
        """The page's revisions, newest first (PageNotFound when it does not exist)."""
        async with self._sessions() as s:
            page = await _find(s, tenant_id, [kb_id], slug)
            if page is None:
                raise PageNotFound(f"no wiki page {slug!r}")
            r = WikiPageRevision
            rows = (
                await s.scalars(
                    select(r)
                    .where(r.page_id == page.id, r.tenant_id == tenant_id)
                    .order_by(r.revision.desc())
                )
            ).all()
        return [
            {
                "revision": x.revision,
                "slug": x.slug,
                "title": x.title,
                "summary": x.summary,
                "content": x.content,
                "change": x.change,
                "author": x.author,
                "created_at": x.created_at.isoformat(),
            }
            for x in rows
        ]

    # -- writes --------------------------------------------------------------------------

    async def writable_kb(
        self, tenant_id: str, kb_ids: Sequence[str], named: str | None, slug: str
    ) -> str:
        """The knowledge base a write to ``slug`` goes to: ``named`` (in reach, its wiki
        enabled); else the KB already holding ``slug``; else the only wiki KB in reach."""
        async with self._sessions() as s:
            kbs = await _wiki_kbs(s, tenant_id, kb_ids)
            if named is not None:
                if named not in kbs:
                    raise NotWritable(f"knowledge base {named!r} has no writable wiki")
                return named
            page = await _find(s, tenant_id, kbs, slug) if kbs else None
        if page is not None:
            return page.knowledge_base_id
        if not kbs:
            raise NotWritable("no knowledge base in reach has its wiki enabled")
        if len(kbs) > 1:
            raise WikiConflict(
                "several wiki knowledge bases are in reach: name the one to write to "
                "(knowledge_base_id)"
            )
        return kbs[0]

    async def write(self, tenant_id: str, kb_id: str, draft: PageDraft, author: str) -> PageChange:
        """Create the page or replace it whole; its outgoing links follow its content."""
        async with self._sessions.begin() as s:
            page = await _find(s, tenant_id, [kb_id], draft.slug, lock=True)
            created = page is None
            if page is None:
                page = WikiPage(
                    id=f"wp_{ULID()}",
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_id,
                    slug=draft.slug,
                    revision=0,
                )
                s.add(page)
            page.title, page.summary, page.content = draft.title, draft.summary, draft.content
            page.page_type, page.aliases = draft.page_type, list(draft.aliases)
            _set_sources(page, draft.source_refs)
            await _commit_revision(s, page, "created" if created else "replaced", author)
        return PageChange(
            id=page.id,
            knowledge_base_id=kb_id,
            slug=page.slug,
            revision=page.revision,
            created=created,
        )

    async def replace_text(
        self,
        tenant_id: str,
        kb_ids: Sequence[str],
        slug: str,
        old: str,
        new: str,
        source_refs: list[dict[str, str]],
        author: str,
        *,
        max_chars: int = 100_000,
    ) -> PageChange:
        """Replace the one occurrence of ``old`` in the page's content (none or several:
        :class:`WikiConflict`); ``source_refs`` are added to the page's."""
        async with self._sessions.begin() as s:
            page = await _find(s, tenant_id, await _writable(s, tenant_id, kb_ids), slug, lock=True)
            if page is None:
                raise PageNotFound(f"no wiki page {slug!r} in a writable wiki")
            count = page.content.count(old)
            if count != 1:
                where = "does not occur" if count == 0 else f"occurs {count} times"
                raise WikiConflict(
                    f"old_text {where} in {slug!r}; give an exact passage that occurs once"
                )
            content = page.content.replace(old, new, 1)
            if len(content) > max_chars:
                raise WikiConflict(f"the page would exceed {max_chars:,} characters")
            page.content = content
            if source_refs:
                _set_sources(page, [*page.source_refs, *source_refs])
            await _commit_revision(s, page, "text_replaced", author)
        return PageChange(
            id=page.id,
            knowledge_base_id=page.knowledge_base_id,
            slug=page.slug,
            revision=page.revision,
        )

    async def rename(
        self, tenant_id: str, kb_ids: Sequence[str], slug: str, new_slug: str, author: str
    ) -> PageChange:
        """Give the page ``new_slug``; the pages linking to it link to the new slug."""
        async with self._sessions.begin() as s:
            page = await _find(s, tenant_id, await _writable(s, tenant_id, kb_ids), slug, lock=True)
            if page is None:
                raise PageNotFound(f"no wiki page {slug!r} in a writable wiki")
            if new_slug == page.slug:
                raise WikiConflict("new_slug is the page's slug already")
            if await _find(s, tenant_id, [page.knowledge_base_id], new_slug) is not None:
                raise WikiConflict(f"a page {new_slug!r} exists already")
            old = page.slug
            page.slug = new_slug
            await _commit_revision(s, page, "renamed", author)
            relinked = await _relink_inbound(s, page.knowledge_base_id, old, new_slug, "", author)
            await s.execute(
                update(WikiIssue)
                .where(
                    WikiIssue.tenant_id == tenant_id,
                    WikiIssue.knowledge_base_id == page.knowledge_base_id,
                    WikiIssue.slug == old,
                )
                .values(slug=new_slug)
            )
        return PageChange(
            id=page.id,
            knowledge_base_id=page.knowledge_base_id,
            slug=new_slug,
            revision=page.revision,
            relinked=relinked,
        )

    async def delete(
        self, tenant_id: str, kb_ids: Sequence[str], slug: str, author: str
    ) -> PageChange:
        """Delete the page (its revisions with it); links to it become plain text."""
        async with self._sessions.begin() as s:
            page = await _find(s, tenant_id, await _writable(s, tenant_id, kb_ids), slug, lock=True)
            if page is None:
                raise PageNotFound(f"no wiki page {slug!r} in a writable wiki")
            kb, title, revision = page.knowledge_base_id, page.title, page.revision
            await s.delete(page)
            await s.flush()
            relinked = await _relink_inbound(s, kb, slug, None, title, author)
        return PageChange(
            id=page.id, knowledge_base_id=kb, slug=slug, revision=revision, relinked=relinked
        )

    async def forget_document(self, tenant_id: str, document_id: str) -> list[str] | None:
        """Delete the tenant's document; the pages citing it lose it from their sources
        (a revision each) and get an ``out_of_date`` issue naming it, in one transaction.
        The slugs flagged, or None when the tenant has no such document."""
        async with self._sessions.begin() as s:
            doc = await s.scalar(
                select(Document)
                .where(Document.id == document_id, Document.tenant_id == tenant_id)
                .with_for_update()
            )
            if doc is None:
                return None
            pages = (
                await s.scalars(
                    select(WikiPage)
                    .where(
                        WikiPage.tenant_id == tenant_id,
                        WikiPage.source_document_ids.contains([document_id]),
                    )
                    .with_for_update()
                )
            ).all()
            for page in pages:
                _set_sources(
                    page, [r for r in page.source_refs if r.get("document_id") != document_id]
                )
                await _commit_revision(s, page, "source_removed", "ingestion")
                s.add(
                    WikiIssue(
                        id=f"wi_{ULID()}",
                        tenant_id=tenant_id,
                        knowledge_base_id=page.knowledge_base_id,
                        slug=page.slug,
                        issue_type="out_of_date",
                        description=f"Source document {doc.title[:200]!r} was deleted; "
                        "check what the page still rests on.",
                        suspected_knowledge_ids=[document_id],
                        reported_by="ingestion",
                    )
                )
            await s.delete(doc)
        return sorted(p.slug for p in pages)

    async def citing(self, tenant_id: str, document_id: str) -> list[tuple[str, str, str]]:
        """(page id, KB, slug) of the pages citing ``document_id``."""
        p = WikiPage
        stmt = select(p.id, p.knowledge_base_id, p.slug).where(
            p.tenant_id == tenant_id,
            p.source_document_ids.contains([document_id]),
        )
        async with self._sessions() as s:
            return [(r.id, r.knowledge_base_id, r.slug) for r in (await s.execute(stmt)).all()]


def _rank(hit: Any, p: type[WikiPage], aliases: ColumnElement[Any]) -> ColumnElement[int]:
    return case(
        (or_(hit(p.slug), hit(p.title)), 0),
        (hit(aliases), 1),
        (hit(p.summary), 2),
        else_=3,
    )


def _pattern_error(exc: DBAPIError) -> WikiError:
    message = str(exc.orig) if exc.orig is not None else str(exc)
    if "statement timeout" in message or "canceling statement" in message:
        return InvalidPattern("the search pattern is too costly to run; use a simpler one")
    if "regular expression" in message:
        detail = message.split("regular expression", 1)[1].split("\n", 1)[0].strip(": ")
        return InvalidPattern(f"invalid regular expression ({detail[:120]})")
    raise exc


async def _wiki_kbs(s: AsyncSession, tenant_id: str, kb_ids: Sequence[str]) -> list[str]:
    """The KBs in reach whose wiki is enabled, in the order named (else oldest first)."""
    k = KnowledgeBase
    stmt = select(k.id).where(k.tenant_id == tenant_id, k.wiki_enabled.is_(True))
    if kb_ids:
        stmt = stmt.where(k.id.in_(list(kb_ids)))
    found = list((await s.scalars(stmt.order_by(k.created_at, k.id))).all())
    if kb_ids:
        order = {kb: i for i, kb in enumerate(kb_ids)}
        found.sort(key=lambda kb: order.get(kb, len(order)))
    return found


async def _writable(s: AsyncSession, tenant_id: str, kb_ids: Sequence[str]) -> list[str]:
    """The wiki KBs in reach, never empty: an empty list would mean every KB of the tenant
    to :func:`_find`."""
    found = await _wiki_kbs(s, tenant_id, kb_ids)
    if not found:
        raise NotWritable("no knowledge base in reach has its wiki enabled")
    return found


async def _find(
    s: AsyncSession, tenant_id: str, kb_ids: Sequence[str], slug: str, *, lock: bool = False
) -> WikiPage | None:
    p = WikiPage
    stmt = select(p).where(
        _scoped(p.knowledge_base_id, p.tenant_id, tenant_id, kb_ids), p.slug == slug
    )
    if lock:
        stmt = stmt.with_for_update()
    pages = list((await s.scalars(stmt)).all())
    if not pages:
        return None
    order = {kb: i for i, kb in enumerate(kb_ids)}
    pages.sort(key=lambda x: (order.get(x.knowledge_base_id, len(order)), x.created_at))
    return pages[0]


def _set_sources(page: WikiPage, refs: list[dict[str, str]]) -> None:
    unique: dict[tuple[str, str], dict[str, str]] = {}
    for ref in refs:
        key = (ref.get("document_id", ""), ref.get("chunk_id", ""))
        if key[0]:
            unique[key] = {k: v for k, v in ref.items() if k in ("document_id", "chunk_id") and v}
    page.source_refs = list(unique.values())
    page.source_document_ids = sorted({k[0] for k in unique})


async def _commit_revision(s: AsyncSession, page: WikiPage, change: str, author: str) -> None:
    """Bump the page's revision, index its text, keep its outgoing links, log the
    revision (the caller's transaction)."""
    page.revision = (page.revision or 0) + 1
    page.updated_at = func.now()
    page.search_text = search_text(page.slug, page.title, page.aliases, page.summary, page.content)
    await s.flush()
    s.add(
        WikiPageRevision(
            tenant_id=page.tenant_id,
            knowledge_base_id=page.knowledge_base_id,
            page_id=page.id,
            revision=page.revision,
            slug=page.slug,
            title=page.title,
            summary=page.summary,
            content=page.content,
            change=change,
            author=author,
        )
    )
    await s.execute(delete(WikiLink).where(WikiLink.from_page_id == page.id))
    targets = [t for t in linked_slugs(page.content) if t != page.slug]
    s.add_all(
        WikiLink(
            from_page_id=page.id,
            to_slug=t,
            tenant_id=page.tenant_id,
            knowledge_base_id=page.knowledge_base_id,
        )
        for t in targets
    )
    await s.flush()


async def _relink_inbound(
    s: AsyncSession, kb_id: str, old: str, new: str | None, title: str, author: str
) -> list[str]:
    """Rewrite the links to ``old`` of the KB's pages (to ``new``, or plain text)."""
    sources = select(WikiLink.from_page_id).where(
        WikiLink.knowledge_base_id == kb_id, WikiLink.to_slug == old
    )
    pages = (
        await s.scalars(select(WikiPage).where(WikiPage.id.in_(sources)).with_for_update())
    ).all()
    change = "link_renamed" if new is not None else "link_removed"
    for page in pages:
        page.content = relink(page.content, old, new, title)
        await _commit_revision(s, page, change, author)
    await s.execute(
        delete(WikiLink).where(WikiLink.knowledge_base_id == kb_id, WikiLink.to_slug == old)
    )
    return sorted(p.slug for p in pages)


async def _view(s: AsyncSession, page: WikiPage) -> PageView:
    p, link = WikiPage, WikiLink
    out_rows = (
        await s.execute(
            select(link.to_slug, p.id, p.title, p.summary)
            .outerjoin(
                p, and_(p.knowledge_base_id == link.knowledge_base_id, p.slug == link.to_slug)
            )
            .where(link.from_page_id == page.id)
            .order_by(link.to_slug)
        )
    ).all()
    in_rows = (
        await s.execute(
            select(p.slug, p.id, p.title, p.summary)
            .join(link, link.from_page_id == p.id)
            .where(link.knowledge_base_id == page.knowledge_base_id, link.to_slug == page.slug)
            .order_by(p.slug)
        )
    ).all()
    return PageView(
        id=page.id,
        knowledge_base_id=page.knowledge_base_id,
        slug=page.slug,
        title=page.title,
        summary=page.summary,
        content=page.content,
        page_type=page.page_type,
        aliases=list(page.aliases),
        source_refs=list(page.source_refs),
        revision=page.revision,
        updated_at=page.updated_at.isoformat(),
        outgoing=[
            LinkedPage(
                slug=r.to_slug,
                id=r.id,
                title=r.title or "",
                summary=r.summary or "",
                exists=r.id is not None,
            )
            for r in out_rows
        ],
        incoming=[
            LinkedPage(slug=r.slug, id=r.id, title=r.title, summary=r.summary) for r in in_rows
        ],
    )

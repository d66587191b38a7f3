"""knowledge's wiki routes (SPEC T-18): what the wiki tools of tool-exec and the gateway's
public wiki routes ask.

Every route names the tenant (the credential's, checked by ``InternalAuth``) and reaches
only the knowledge bases the request names, narrowed to the credential's list of a
KB-restricted key (A-09); a page, issue or KB outside them is the 404 of a missing one.
Writes go only to knowledge bases whose wiki is enabled (403 otherwise); the search and
read routes also take tool-exec's service credential (a shared agent reads its owner's
wiki, SPEC E-26), the write routes never do.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field, field_validator
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import (
    INDEX_SLUG,
    InvalidPattern,
    NotWritable,
    PageDraft,
    PageNotFound,
    WikiConflict,
    WikiError,
    WikiPages,
)
from weft_storage.knowledge.wiki_issues import IssueStatus, IssueType, WikiGenerations, WikiIssues
from weft_storage.knowledge.wiki_text import InvalidSlug, normalize_slug

from weft_knowledge.api import RETRIEVE, as_filter, scope_of

MAX_PAGE_CHARS = 100_000
"""Longest page content (a page is read whole: past this, split it into linked pages)."""
MAX_EDIT_CHARS = 20_000
WIKI_READ_ROUTES = (
    "/internal/wiki/search",
    "/internal/wiki/pages/read",
    "/internal/wiki/issues",
    "/internal/wiki/issues/{issue_id}",
)
WIKI_SYSTEM_ROUTES = dict.fromkeys(WIKI_READ_ROUTES, RETRIEVE)
"""The wiki's reads as system routes too: tool-exec's credential for a shared agent."""
Author = Literal["agent", "api", "ingestion"]
Slug = Annotated[str, Field(min_length=1, max_length=400)]
KbIds = Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=100)]


class Scoped(BaseModel):
    """What every wiki body names: the tenant and the KBs it may reach (none: all)."""

    tenant_id: str = Field(min_length=1, max_length=128)
    knowledge_base_ids: KbIds = Field(default_factory=list)


class SearchBody(Scoped):
    """``POST /internal/wiki/search``: ``regex`` None tries a regex, else a literal."""

    query: str = Field(min_length=1, max_length=500)
    regex: bool | None = None
    limit: int = Field(default=10, ge=1, le=50)


class ReadBody(Scoped):
    """``POST /internal/wiki/pages/read``."""

    slugs: list[Slug] = Field(min_length=1, max_length=10)


class SourceRef(BaseModel):
    """A document (and optionally one of its chunks) a page was written from."""

    document_id: str = Field(min_length=1, max_length=64)
    chunk_id: str | None = Field(default=None, max_length=64)


class SlugBody(Scoped):
    """A change to one page."""

    slug: Slug
    author: Author = "agent"


class WriteBody(SlugBody):
    """``PUT /internal/wiki/pages``."""

    knowledge_base_id: str | None = Field(default=None, max_length=64)
    title: str = Field(min_length=1, max_length=300)
    summary: str = Field(default="", max_length=2000)
    content: str = Field(max_length=MAX_PAGE_CHARS)
    page_type: str = Field(default="concept", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    aliases: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=20
    )
    source_refs: list[SourceRef] = Field(default_factory=list, max_length=50)

    @field_validator("title", "summary", "content")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value


class ReplaceBody(SlugBody):
    """``POST /internal/wiki/pages/replace-text``."""

    old_text: str = Field(min_length=1, max_length=MAX_EDIT_CHARS)
    new_text: str = Field(max_length=MAX_EDIT_CHARS)
    source_refs: list[SourceRef] = Field(default_factory=list, max_length=50)


class RenameBody(SlugBody):
    """``POST /internal/wiki/pages/rename``."""

    new_slug: Slug


class FlagBody(SlugBody):
    """``POST /internal/wiki/issues/flag``."""

    issue_type: IssueType
    description: str = Field(min_length=1, max_length=4000)
    suspected_knowledge_ids: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=20
    )


class IssueUpdate(Scoped):
    """``POST /internal/wiki/issues/{issue_id}/status``."""

    status: IssueStatus


def slug_of(raw: str) -> str:
    """A valid slug, or 422 saying why."""
    try:
        return normalize_slug(raw)
    except InvalidSlug as exc:
        raise HTTPException(422, str(exc)) from None


def refusal(exc: WikiError) -> HTTPException:
    """The HTTP answer of a wiki refusal (its text is safe to show a model)."""
    status = {PageNotFound: 404, WikiConflict: 409, NotWritable: 403, InvalidPattern: 422}
    return HTTPException(status.get(type(exc), 400), str(exc))


def wiki_router(
    store: KnowledgeStore,
    reader: DocumentReader,
    pages: WikiPages,
    issues: WikiIssues,
    generations: WikiGenerations,
) -> APIRouter:
    """The wiki's internal routes."""
    router = APIRouter(tags=["wiki"])

    def reach(request: Request, named: list[str]) -> list[str]:
        kbs = as_filter(scope_of(request, named))
        if kbs is None:  # a restricted credential named only KBs outside its list
            raise HTTPException(404, "no knowledge base in reach")
        return kbs

    async def sources(
        tenant_id: str, kbs: list[str], refs: list[SourceRef]
    ) -> list[dict[str, str]]:
        """The refs, each checked to be a document (and chunk) of the tenant in reach."""
        chunk_ids = [r.chunk_id for r in refs if r.chunk_id]
        chunks = {c.chunk_id: c for c in await reader.chunks_by_ids(tenant_id, kbs, chunk_ids)}
        out: list[dict[str, str]] = []
        for ref in refs:
            if ref.chunk_id:
                chunk = chunks.get(ref.chunk_id)
                if chunk is None or chunk.document_id != ref.document_id:
                    raise HTTPException(404, f"source chunk {ref.chunk_id!r} not found")
            elif await reader.document(tenant_id, kbs, ref.document_id) is None:
                raise HTTPException(404, f"source document {ref.document_id!r} not found")
            out.append(ref.model_dump(exclude_none=True))
        return out

    @router.post("/internal/wiki/search")
    async def search(request: Request, body: SearchBody) -> dict[str, Any]:
        """Pages matching ``query`` (regex when valid and ``regex`` is not false)."""
        kbs = reach(request, body.knowledge_base_ids)
        literal = body.regex is False
        try:
            hits = await pages.search(
                body.tenant_id, kbs, body.query, regex=not literal, limit=body.limit
            )
        except InvalidPattern as exc:
            if body.regex is True or "too costly" in str(exc):
                raise refusal(exc) from None
            literal = True  # not a valid regex (C++): matched as the text it is
            hits = await pages.search(
                body.tenant_id, kbs, body.query, regex=False, limit=body.limit
            )
        return {"mode": "literal" if literal else "regex", "results": [asdict(h) for h in hits]}

    @router.post("/internal/wiki/pages/read")
    async def read(request: Request, body: ReadBody) -> dict[str, Any]:
        """The pages named; ``index`` (when no page has that slug) is the contents."""
        kbs = reach(request, body.knowledge_base_ids)
        slugs = [slug_of(s) for s in body.slugs]
        found = await pages.read(body.tenant_id, kbs, slugs)
        missing = [s for s in slugs if s not in {p.slug for p in found}]
        answer: dict[str, Any] = {"pages": [asdict(p) for p in found], "missing": missing}
        if INDEX_SLUG in missing:
            answer["index"] = await pages.index(body.tenant_id, kbs)
            answer["missing"] = [s for s in missing if s != INDEX_SLUG]
        return answer

    @router.put("/internal/wiki/pages")
    async def write(request: Request, body: WriteBody) -> dict[str, Any]:
        """Create or replace a page (in ``knowledge_base_id``, else where it is, else the
        only wiki KB in reach)."""
        kbs = reach(request, body.knowledge_base_ids)
        slug = slug_of(body.slug)
        try:
            kb = await pages.writable_kb(body.tenant_id, kbs, body.knowledge_base_id, slug)
            refs = await sources(body.tenant_id, [kb], body.source_refs)
            draft = PageDraft(
                slug=slug, title=body.title, summary=body.summary, content=body.content,
                page_type=body.page_type, aliases=body.aliases, source_refs=refs,
            )  # fmt: skip
            return asdict(await pages.write(body.tenant_id, kb, draft, body.author))
        except WikiError as exc:
            raise refusal(exc) from None

    @router.post("/internal/wiki/pages/replace-text")
    async def replace_text(request: Request, body: ReplaceBody) -> dict[str, Any]:
        """Replace the one occurrence of ``old_text``."""
        kbs = reach(request, body.knowledge_base_ids)
        try:
            refs = await sources(body.tenant_id, kbs, body.source_refs)
            changed = await pages.replace_text(
                body.tenant_id, kbs, slug_of(body.slug), body.old_text, body.new_text, refs,
                body.author, max_chars=MAX_PAGE_CHARS,
            )  # fmt: skip
        except WikiError as exc:
            raise refusal(exc) from None
        return asdict(changed)

    @router.post("/internal/wiki/pages/rename")
    async def rename(request: Request, body: RenameBody) -> dict[str, Any]:
        """Rename a page; the pages linking to it follow."""
        kbs = reach(request, body.knowledge_base_ids)
        try:
            changed = await pages.rename(
                body.tenant_id, kbs, slug_of(body.slug), slug_of(body.new_slug), body.author
            )
        except WikiError as exc:
            raise refusal(exc) from None
        return asdict(changed)

    @router.post("/internal/wiki/pages/delete")
    async def delete(request: Request, body: SlugBody) -> dict[str, Any]:
        """Delete a page; links to it become plain text."""
        kbs = reach(request, body.knowledge_base_ids)
        try:
            changed = await pages.delete(body.tenant_id, kbs, slug_of(body.slug), body.author)
        except WikiError as exc:
            raise refusal(exc) from None
        return asdict(changed)

    @router.post("/internal/wiki/issues/flag", status_code=201)
    async def flag(request: Request, body: FlagBody) -> dict[str, Any]:
        """Record an issue on an existing page."""
        kbs = reach(request, body.knowledge_base_ids)
        slug = slug_of(body.slug)
        found = await pages.read(body.tenant_id, kbs, [slug])
        if not found:
            raise HTTPException(404, f"no wiki page {slug!r}")
        issue = await issues.flag(
            body.tenant_id, found[0].knowledge_base_id, slug, body.issue_type, body.description,
            body.suspected_knowledge_ids, body.author,
        )  # fmt: skip
        return asdict(issue)

    @router.get("/internal/wiki/issues")
    async def list_issues(
        request: Request,
        tenant_id: str,
        kb_id: Annotated[list[str] | None, Query(max_length=100)] = None,
        slug: Annotated[str | None, Query(max_length=400)] = None,
        status: IssueStatus | None = None,
    ) -> list[dict[str, Any]]:
        """Issues of a page (of every page without ``slug``), newest first."""
        kbs = reach(request, kb_id or [])
        named = None if slug is None else slug_of(slug)
        return [asdict(i) for i in await issues.for_page(tenant_id, kbs, named, status)]

    @router.get("/internal/wiki/issues/{issue_id}")
    async def get_issue(
        request: Request,
        tenant_id: str,
        issue_id: str,
        kb_id: Annotated[list[str] | None, Query(max_length=100)] = None,
    ) -> dict[str, Any]:
        """One issue in reach."""
        found = await issues.get(tenant_id, reach(request, kb_id or []), issue_id)
        if found is None:
            raise HTTPException(404, f"issue {issue_id!r} not found")
        return asdict(found)

    # A path of its own: the issue's read path is a system route (matched by path alone).
    @router.post("/internal/wiki/issues/{issue_id}/status")
    async def update_issue(request: Request, issue_id: str, body: IssueUpdate) -> dict[str, Any]:
        """Set an issue's status."""
        kbs = reach(request, body.knowledge_base_ids)
        changed = await issues.set_status(body.tenant_id, kbs, issue_id, body.status)
        if changed is None:
            raise HTTPException(404, f"issue {issue_id!r} not found")
        return asdict(changed)

    # Not ``DELETE /internal/documents/{doc_id}``: system routes are matched by path
    # alone, and that path is a read that tool-exec's service credential opens.
    @router.delete("/internal/knowledge-bases/{kb_id}/documents/{doc_id}")
    async def delete_document(
        request: Request, tenant_id: str, kb_id: str, doc_id: str
    ) -> dict[str, Any]:
        """Delete a document of ``kb_id`` in reach (its chunks and file with it); the
        wiki pages citing it lose it as a source and are flagged ``out_of_date``."""
        kbs = reach(request, [kb_id])
        if kb_id not in kbs or await reader.document(tenant_id, [kb_id], doc_id) is None:
            raise HTTPException(404, f"document {doc_id!r} not found")
        flagged = await pages.forget_document(tenant_id, doc_id)
        if flagged is None:
            raise HTTPException(404, f"document {doc_id!r} not found")
        return {"id": doc_id, "deleted": True, "wiki_pages_flagged": flagged}

    async def require_kb(request: Request, tenant_id: str, kb_id: str) -> None:
        if kb_id not in reach(request, [kb_id]) or not await store.knowledge_base_exists(
            tenant_id, kb_id
        ):
            raise HTTPException(404, f"knowledge base {kb_id!r} not found")

    @router.get("/internal/knowledge-bases/{kb_id}/wiki")
    async def wiki_status(request: Request, tenant_id: str, kb_id: str) -> dict[str, Any]:
        """The KB's wiki: enabled, its generation progress and page count."""
        await require_kb(request, tenant_id, kb_id)
        kbs = {kb["id"]: kb for kb in await store.list_knowledge_bases(tenant_id)}
        progress = await generations.progress(tenant_id, kb_id)
        return {"wiki_enabled": bool(kbs[kb_id].get("wiki_enabled")), **progress}

    @router.get("/internal/knowledge-bases/{kb_id}/wiki/pages")
    async def list_pages(
        request: Request,
        tenant_id: str,
        kb_id: str,
        page: Annotated[int, Query(ge=1, le=100_000)] = 1,
        size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """The KB's pages by slug, without content."""
        await require_kb(request, tenant_id, kb_id)
        total, items = await pages.list_pages(tenant_id, kb_id, page=page, size=size)
        return {"total": total, "items": items}

    @router.get("/internal/knowledge-bases/{kb_id}/wiki/page")
    async def get_page(
        request: Request, tenant_id: str, kb_id: str, slug: Annotated[str, Query(max_length=400)]
    ) -> dict[str, Any]:
        """One page with its links."""
        await require_kb(request, tenant_id, kb_id)
        found = await pages.read(tenant_id, [kb_id], [slug_of(slug)])
        if not found:
            raise HTTPException(404, f"no wiki page {slug[:200]!r}")
        return asdict(found[0])

    @router.get("/internal/knowledge-bases/{kb_id}/wiki/page/history")
    async def page_history(
        request: Request, tenant_id: str, kb_id: str, slug: Annotated[str, Query(max_length=400)]
    ) -> list[dict[str, Any]]:
        """The page's revisions, newest first."""
        await require_kb(request, tenant_id, kb_id)
        try:
            return await pages.history(tenant_id, kb_id, slug_of(slug))
        except WikiError as exc:
            raise refusal(exc) from None

    return router

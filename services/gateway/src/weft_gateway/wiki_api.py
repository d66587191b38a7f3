"""The wiki's public read routes (``/api/v1``, SPEC T-18): a knowledge base's wiki status,
its pages, one page with its links, a page's history and its issues.

Behind the knowledge scope guard like every knowledge route (a KB outside a restricted
key's list is 404, A-09) and proxied to knowledge's internal wiki routes with the
caller's credential. A slug may hold ``/``, so it goes in the query, not the path.
"""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query

from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.knowledge_client import KnowledgeClient
from weft_gateway.knowledge_scope import KnowledgeScope, seal

SlugQuery = Annotated[str, Query(min_length=1, max_length=400, description="The page's slug.")]


def wiki_router(knowledge: KnowledgeClient, auth: ApiKeyAuth, scope: KnowledgeScope) -> APIRouter:
    """Routes under ``/api/v1/knowledge-bases/{kb_id}/wiki``."""
    guard = scope.guard(auth)
    router = APIRouter(prefix="/api/v1", tags=["wiki"], dependencies=[Depends(guard)])
    Who = Annotated[Principal, Depends(auth)]

    def internal(kb_id: str, tail: str = "") -> str:
        return f"/internal/knowledge-bases/{kb_id}/wiki{tail}"

    @router.get("/knowledge-bases/{kb_id}/wiki")
    async def wiki_status(who: Who, kb_id: str) -> dict[str, Any]:
        """Whether the wiki is on, and its generation progress (documents by status)."""
        found: dict[str, Any] = await knowledge.call(
            "GET", internal(kb_id), params={"tenant_id": who.tenant_id}
        )
        return found

    @router.get("/knowledge-bases/{kb_id}/wiki/pages")
    async def list_pages(
        who: Who,
        kb_id: str,
        page: Annotated[int, Query(ge=1, le=100_000)] = 1,
        page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """The pages by slug (no content)."""
        params = {"tenant_id": who.tenant_id, "page": page, "size": page_size}
        listed: dict[str, Any] = await knowledge.call(
            "GET", internal(kb_id, "/pages"), params=params
        )
        return listed

    @router.get("/knowledge-bases/{kb_id}/wiki/page")
    async def get_page(who: Who, kb_id: str, slug: SlugQuery) -> dict[str, Any]:
        """One page: content, sources, links in and out."""
        params = {"tenant_id": who.tenant_id, "slug": slug}
        found: dict[str, Any] = await knowledge.call("GET", internal(kb_id, "/page"), params=params)
        return found

    @router.get("/knowledge-bases/{kb_id}/wiki/page/history")
    async def page_history(who: Who, kb_id: str, slug: SlugQuery) -> list[dict[str, Any]]:
        """The page's revisions, newest first."""
        params = {"tenant_id": who.tenant_id, "slug": slug}
        found: list[dict[str, Any]] = await knowledge.call(
            "GET", internal(kb_id, "/page/history"), params=params
        )
        return found

    @router.get("/knowledge-bases/{kb_id}/wiki/issues")
    async def issues(
        who: Who,
        kb_id: str,
        slug: Annotated[str | None, Query(max_length=400)] = None,
        status: Literal["pending", "resolved", "ignored"] | None = None,
    ) -> list[dict[str, Any]]:
        """Issues flagged on the KB's pages (of one page with ``slug``), newest first."""
        params: dict[str, str] = {"tenant_id": who.tenant_id, "kb_id": kb_id}
        if slug is not None:
            params["slug"] = slug
        if status is not None:
            params["status"] = status
        found: list[dict[str, Any]] = await knowledge.call(
            "GET", "/internal/wiki/issues", params=params
        )
        return found

    return seal(router, guard)

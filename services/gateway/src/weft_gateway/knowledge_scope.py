"""Which knowledge bases an API key reaches (SPEC A-09), checked in one place.

A key's ``knowledge_base_ids`` (None: every KB of its tenant) bounds everything it can
see and change. A knowledge base outside that list answers exactly the 404 of a missing
one, and so does a document of such a knowledge base: a restricted key cannot even learn
that they exist. Creating a knowledge base with a restricted key is 403: the new base
would lie outside the key's own fixed list, so the key could write it but never use it.

``KnowledgeScope.guard`` is a router-level dependency of the knowledge routes: it checks
every ``{kb_id}`` and ``{doc_id}`` in a route's path before the handler runs, and
``seal`` refuses, when the app is built, a route whose path names an id the guard does
not know. A route added to that router is therefore checked without asking for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.routing import APIRoute

from weft_gateway.auth import Principal

GUARDED_PATH_PARAMS = frozenset({"kb_id", "doc_id"})
"""The path parameters the guard checks; ``seal`` refuses any other one."""
WITHIN_KB_PATH_PARAMS = frozenset({"entry_id"})
"""Ids of rows that knowledge looks up inside the guarded ``{kb_id}`` (tenant and base in
its query, a row of another base is its 404): allowed only on a path that names a base."""


class KnowledgeBases(Protocol):
    """Whether a knowledge base exists for a tenant (the knowledge service, ``KnowledgeClient``)."""

    async def knowledge_base_exists(self, tenant_id: str, kb_id: str) -> bool: ...


class DocumentHomes(Protocol):
    """Which knowledge base holds a document (the knowledge service, ``KnowledgeClient``)."""

    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None: ...


def key_reaches(who: Principal, kb_id: str) -> bool:
    """Whether the caller's key may touch ``kb_id`` at all (its tenant is checked apart)."""
    return who.knowledge_base_ids is None or kb_id in who.knowledge_base_ids


def visible_to(who: Principal, knowledge_bases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The knowledge bases of a tenant listing that the caller's key may see."""
    return [kb for kb in knowledge_bases if key_reaches(who, kb["id"])]


def refuse_restricted_create(who: Principal) -> None:
    """403 when a KB-restricted key tries to create a knowledge base."""
    if who.knowledge_base_ids is not None:
        raise HTTPException(
            403,
            "this API key is limited to some knowledge bases and cannot create new ones "
            "(a new knowledge base would be outside its list); use an unrestricted key",
        )


def kb_not_found(kb_id: str) -> HTTPException:
    """The 404 of a missing knowledge base, also given for one outside the key's list."""
    return HTTPException(404, f"knowledge base {kb_id!r} not found")


def document_not_found(doc_id: str) -> HTTPException:
    """The 404 of a missing document, also given for one the key may not reach."""
    return HTTPException(404, f"document {doc_id!r} not found")


class KnowledgeScope:
    """The caller's reach over knowledge bases and their documents."""

    def __init__(self, bases: KnowledgeBases, documents: DocumentHomes):
        self._bases = bases
        self._documents = documents

    async def require(self, who: Principal, kb_id: str) -> None:
        """404 unless ``kb_id`` is a knowledge base of the caller's tenant in its key's
        list; the key is checked first, so an out-of-scope id costs no query."""
        if not key_reaches(who, kb_id):
            raise kb_not_found(kb_id)
        if not await self._bases.knowledge_base_exists(who.tenant_id, kb_id):
            raise kb_not_found(kb_id)

    async def require_all(self, who: Principal, kb_ids: Sequence[str]) -> None:
        """``require`` for every id of a request body or query."""
        for kb_id in kb_ids:
            await self.require(who, kb_id)

    async def require_document(self, who: Principal, doc_id: str, kb_id: str | None) -> None:
        """404 unless document ``doc_id`` of the tenant lies in a knowledge base the key
        reaches (and in ``kb_id`` when the path names one)."""
        home = await self._documents.knowledge_base_of(who.tenant_id, doc_id)
        if home is None or not key_reaches(who, home) or kb_id not in (None, home):
            raise document_not_found(doc_id)

    def guard(self, auth: Callable[..., Awaitable[Principal]]) -> Callable[..., Awaitable[None]]:
        """A router-level dependency checking the ids in every route's path."""

        # A default, not ``Annotated``: with postponed annotations FastAPI could not
        # resolve a closure variable named inside a string annotation.
        async def knowledge_scope_guard(request: Request, who: Principal = Depends(auth)) -> None:
            params = request.path_params
            kb_id = params.get("kb_id")
            if kb_id is not None:
                await self.require(who, kb_id)
            doc_id = params.get("doc_id")
            if doc_id is not None:
                await self.require_document(who, doc_id, kb_id)

        return knowledge_scope_guard


def seal(router: APIRouter, guard: Callable[..., Awaitable[None]]) -> APIRouter:
    """Refuse (at app build time) a route of ``router`` that escapes the guard: one
    without it, or one whose path names an id the guard does not check."""
    for route in router.routes:
        if not isinstance(route, APIRoute):
            continue
        if not any(dep.call is guard for dep in route.dependant.dependencies):
            raise RuntimeError(f"route {route.path} is not behind the knowledge scope guard")
        named = set(route.param_convertors)
        within = WITHIN_KB_PATH_PARAMS if "kb_id" in named else frozenset()
        unknown = named - GUARDED_PATH_PARAMS - within
        if unknown:
            raise RuntimeError(
                f"route {route.path} names {sorted(unknown)}, which the knowledge scope "
                f"guard does not check (it checks {sorted(GUARDED_PATH_PARAMS)})"
            )
    return router

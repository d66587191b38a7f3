"""The knowledge service as the gateway reaches it: the public knowledge routes, the
knowledge scope guard and question origins ask it over its internal routes with the
caller's API credential (``ServiceClient`` sends it), as agents are asked of agent-config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException

from weft_gateway.clients import ServiceClient


@dataclass(frozen=True, kw_only=True)
class SourceChunk:
    """A chunk with its document's title (a question origin's source)."""

    chunk_id: str
    document_id: str
    knowledge_base_id: str
    title: str
    content: str
    position: int = 0


@dataclass(frozen=True, kw_only=True)
class ChunkText:
    """A chunk in reading order."""

    id: str
    position: int
    content: str


def _q(value: str) -> str:
    return quote(value, safe="")


class KnowledgeClient(ServiceClient):
    """knowledge's internal routes (4xx become the same status for our caller)."""

    async def _found(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer, None for a 404."""
        try:
            return await self.call(method, path, **kwargs)
        except HTTPException as exc:
            if exc.status_code == 404:
                return None
            raise

    async def knowledge_base_exists(self, tenant_id: str, kb_id: str) -> bool:
        """Whether ``kb_id`` is a knowledge base of the tenant (the key's list applied)."""
        path = f"/internal/knowledge-bases/{_q(kb_id)}"
        return await self._found("GET", path, params={"tenant_id": tenant_id}) is not None

    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None:
        """The knowledge base holding the tenant's document ``doc_id``, None when none."""
        info = await self.document(tenant_id, doc_id)
        return None if info is None else str(info["knowledge_base_id"])

    async def document(
        self, tenant_id: str, doc_id: str, kb_id: str | None = None
    ) -> dict[str, Any] | None:
        """A document's status and progress (in ``kb_id`` when given), None when none."""
        params: dict[str, Any] = {"tenant_id": tenant_id}
        if kb_id is not None:
            params["kb_id"] = kb_id
        found: dict[str, Any] | None = await self._found(
            "GET", f"/internal/documents/{_q(doc_id)}", params=params
        )
        return found

    async def chunk(self, tenant_id: str, kb_ids: list[str], chunk_id: str) -> SourceChunk | None:
        """One chunk in scope, with its document's title."""
        body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "chunk_ids": [chunk_id]}
        hits = await self.call("POST", "/internal/chunks", json=body, resend=True) or []
        if not hits:
            return None
        hit = hits[0]
        return SourceChunk(
            chunk_id=hit["chunk_id"], document_id=hit["document_id"],
            knowledge_base_id=hit["knowledge_base_id"], title=hit["title"],
            content=hit["content"], position=hit["position"],
        )  # fmt: skip

    async def chunks(self, tenant_id: str, doc_id: str, *, limit: int) -> list[ChunkText]:
        """The first ``limit`` chunks of a document, in reading order."""
        rows = await self._found(
            "GET",
            f"/internal/documents/{_q(doc_id)}/chunks",
            params={"tenant_id": tenant_id, "limit": limit},
        )
        return [ChunkText(**row) for row in rows or []]

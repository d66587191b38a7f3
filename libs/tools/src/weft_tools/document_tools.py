"""``read_document`` (SPEC T-08) and ``list_documents`` (T-09), read from the knowledge
service with the turn's credential.

Under a mention (SPEC A-11: the turn's ``@doc``/``@tag`` narrowed its knowledge) both
read only the mentioned documents, as ``search_knowledge`` does: ``read_document`` of
another document (or of one of its chunks) is the "not found" of one outside the turn's
knowledge bases, and ``list_documents`` lists the mentioned ones alone, its total and
pages counted over them (the reference: "@fichier / @tag pour list_documents avant
pagination ; total_docs et next_page limités au scope").
"""

from __future__ import annotations

import re
from typing import Any

from weft_contracts.knowledge import ChunkRow, DocumentInfo
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import (
    LIST_DOCUMENTS,
    READ_DOCUMENT,
    ListDocumentsArguments,
    ReadDocumentArguments,
)

from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable
from weft_tools.knowledge_scope import KnowledgeScope, OutOfScope

MAX_HITS = 20
MAX_SCAN_CHUNKS = 5000


class ReadDocumentTool:
    """Pages, neighbourhoods and in-document search."""

    spec = READ_DOCUMENT

    def __init__(self, reader: KnowledgeClient, scope: KnowledgeScope):
        self._reader = reader
        self._scope = scope

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Dispatch on the handle kind and arguments."""
        args = call.args(ReadDocumentArguments)
        handle = args.id.strip()
        try:
            if handle.startswith("c"):
                return await self._around_chunk(call, handle)
            doc = await self._document(call, await self._scope.resolve(call, handle, "d"))
            if args.query:
                return await self._find(call, doc)
            return await self._page(call, doc)
        except (OutOfScope, KnowledgeUnavailable) as exc:
            return ToolOutcome(success=False, error=f"read_document: {exc}")
        except re.error as exc:
            return ToolOutcome(success=False, error=f"read_document: invalid regex: {exc}")

    async def _document(self, call: ToolInvocation, doc_id: str) -> DocumentInfo:
        doc = await self._reader.document(
            call.tenant_id,
            call.context.knowledge_base_ids,
            doc_id,
            credential=self._reader.credential_for(call),
        )
        if doc is None or not _mentioned(call, doc_id):
            raise OutOfScope("document not found in this conversation's knowledge bases")
        return doc

    async def _page(self, call: ToolInvocation, doc: DocumentInfo) -> ToolOutcome:
        args = call.args(ReadDocumentArguments)
        offset, limit = args.offset, args.limit
        rows = await self._reader.chunks(
            call.tenant_id,
            doc.id,
            start=offset,
            limit=limit + 1,
            credential=self._reader.credential_for(call),
        )
        budget = call.context.max_output_chars * 4 // 5
        page: list[ChunkRow] = []
        used = 0
        for row in rows[:limit]:
            used += len(row.content) + 40
            if page and used > budget:  # a page stays under 80 % of the tool budget
                break
            page.append(row)
        more = len(page) < len(rows)
        payload = await self._payload(call, doc, page)
        if more and page:
            payload["next_offset"] = page[-1].position + 1
        return ToolOutcome(success=True, output=dumps(payload), display_type="document")

    async def _around_chunk(self, call: ToolInvocation, handle: str) -> ToolOutcome:
        chunk_id = await self._scope.resolve(call, handle, "c")
        hit = await self._reader.chunk(
            call.tenant_id,
            call.context.knowledge_base_ids,
            chunk_id,
            credential=self._reader.credential_for(call),
        )
        if hit is None:
            raise OutOfScope(f"chunk {handle!r} not found in this conversation's knowledge bases")
        doc = await self._document(call, hit.document_id)
        around = call.args(ReadDocumentArguments).context
        start = max(0, hit.position - around)
        rows = await self._reader.chunks(
            call.tenant_id,
            doc.id,
            start=start,
            limit=2 * around + 1,
            credential=self._reader.credential_for(call),
        )
        payload = await self._payload(call, doc, rows)
        return ToolOutcome(success=True, output=dumps(payload), display_type="document")

    async def _find(self, call: ToolInvocation, doc: DocumentInfo) -> ToolOutcome:
        args = call.args(ReadDocumentArguments)
        query = args.query or ""
        matches = _matcher(query, args.regex)
        rows = await self._reader.chunks(
            call.tenant_id,
            doc.id,
            limit=MAX_SCAN_CHUNKS,
            credential=self._reader.credential_for(call),
        )
        hits = [i for i, row in enumerate(rows) if matches(row.content)][:MAX_HITS]
        keep = sorted({j for i in hits for j in (i - 1, i, i + 1) if 0 <= j < len(rows)})
        payload = await self._payload(call, doc, [rows[j] for j in keep])
        payload["query"] = query
        payload["hits"] = [await self._scope.handle(call, "chunk", rows[i].id) for i in hits]
        return ToolOutcome(success=True, output=dumps(payload), display_type="document")

    async def _payload(
        self, call: ToolInvocation, doc: DocumentInfo, rows: list[ChunkRow]
    ) -> dict[str, Any]:
        chunks = [
            {
                "id": await self._scope.handle(call, "chunk", r.id),
                "offset": r.position,
                "content": r.content,
            }
            for r in rows
        ]
        return {
            "document": await self._scope.handle(call, "document", doc.id),
            "title": doc.title,
            "total_chunks": doc.chunk_count or None,
            "chunks": chunks,
        }


def _mentioned(call: ToolInvocation, doc_id: str) -> bool:
    """Whether the turn's mentions (if any) let it read ``doc_id``."""
    return not call.context.mentioned or doc_id in call.context.document_ids


def _matcher(query: str, regex: bool) -> Any:
    if regex:
        pattern = re.compile(query, re.IGNORECASE)
        return lambda text: pattern.search(text) is not None
    words = [w.lower() for w in query.split() if w]
    return lambda text: all(w in text.lower() for w in words)


class ListDocumentsTool:
    """Paginated listing with dN handles."""

    spec = LIST_DOCUMENTS

    def __init__(self, reader: KnowledgeClient, scope: KnowledgeScope):
        self._reader = reader
        self._scope = scope

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """One page."""
        args = call.args(ListDocumentsArguments)
        page, size = args.page, args.page_size
        try:
            total, docs = await self._reader.list_documents(
                call.tenant_id,
                call.context.knowledge_base_ids,
                keyword=args.keyword or "",
                page=page,
                size=size,
                credential=self._reader.credential_for(call),
                document_ids=call.context.document_ids if call.context.mentioned else None,
            )
        except KnowledgeUnavailable as exc:
            return ToolOutcome(success=False, error=f"list_documents: {exc}")
        items = [
            {
                "id": await self._scope.handle(call, "document", d.id),
                "title": d.title,
                "file_name": d.file_name,
                "status": d.status,
                "chunks": d.chunk_count,
            }
            for d in docs
        ]
        payload: dict[str, Any] = {
            "total": total,
            "page": page,
            "page_size": size,
            "documents": items,
        }
        if page * size < total:
            payload["next_page"] = page + 1
        return ToolOutcome(success=True, output=dumps(payload), display_type="document_list")

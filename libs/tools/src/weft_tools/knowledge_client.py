"""The knowledge service as tool-exec's knowledge tools reach it (search, read, list).

knowledge owns knowledge bases, documents and chunks; the tools ask it over its internal
routes with the turn's credential (audience ``knowledge``), which is where knowledge reads
the tenant from (and a KB-restricted key's list, SPEC A-09). One pooled connection set per
process: a search is one request on a kept-alive connection.

A shared agent's knowledge tools read its owner's knowledge bases (SPEC E-26): the turn's
credential names the caller's tenant, not the owner's, so for those calls tool-exec
presents its own service credential (scope :data:`RETRIEVE_SCOPE`) naming the owner
tenant, as it vouched for that tenant when it read the tables itself; the engine puts the
owner in the call's context from agent-config's resolution, on a record whose turn
credential the worker verified.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote

import httpx
from weft_contracts.knowledge import ChunkRow, DocumentInfo
from weft_mcp_client.safe_http import tls_context
from weft_tool_catalog.registry import ToolInvocation
from weft_tool_catalog.specs import SearchMode

from weft_tools.ranking import Candidate, NoIndexInScope, SearchReport

DEFAULT_KNOWLEDGE_URL = "http://127.0.0.1:8088"
FILE_NAME_HEADER = "X-Weft-File-Name"
RETRIEVE_SCOPE = "knowledge:retrieve"
"""tool-exec's service credential on knowledge's read routes (a shared agent's calls)."""


class KnowledgeUnavailable(Exception):
    """knowledge could not answer; ``str()`` is safe to show the model."""


class KnowledgeClient:
    """knowledge's internal routes, each call presenting the turn's credential."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 15.0,
        transport: httpx.AsyncBaseTransport | None = None,
        event_hooks: Mapping[str, list[Any]] | None = None,
        own_credential: Callable[[], str] | None = None,
    ):
        """``event_hooks``: httpx hooks of every request (the process's trace
        propagation: the call's ``traceparent`` reaches knowledge); ``own_credential``:
        tool-exec's service credential for a shared agent's calls (None: such a call
        presents the turn's, which knowledge refuses for another tenant)."""
        self._own_credential = own_credential
        self._base_url = base_url or os.environ.get("WEFT_KNOWLEDGE_URL", DEFAULT_KNOWLEDGE_URL)
        self._timeout_s = timeout_s
        self._transport = transport
        self._hooks = event_hooks
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> httpx.AsyncClient:
        # One pool per event loop: a pool is bound to the loop that opened it.
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._http = httpx.AsyncClient(
                base_url=self._base_url, timeout=self._timeout_s, transport=self._transport,
                verify=tls_context(), event_hooks=self._hooks,
            )  # fmt: skip
            self._loop = loop
        return self._http

    def credential_for(self, call: ToolInvocation) -> str | None:
        """What ``call`` presents: the turn's credential, or tool-exec's own when the call
        reads a shared agent's owner's knowledge bases (its tenant is the owner's)."""
        owner = call.context.retrieval_tenant_id
        if owner and owner == call.tenant_id and self._own_credential is not None:
            return self._own_credential()
        return call.credential

    async def _send(
        self, method: str, path: str, credential: str | None, **kwargs: Any
    ) -> httpx.Response | None:
        """The response, None for a 404; a failure raises :class:`KnowledgeUnavailable`."""
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        try:
            resp = await self._client().request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise KnowledgeUnavailable(
                f"the knowledge service is unavailable ({type(exc).__name__}); try again"
            ) from None
        if resp.status_code == 404:
            return None
        if resp.status_code == 409:
            raise NoIndexInScope(_detail(resp))
        if resp.status_code >= 400:
            raise KnowledgeUnavailable(f"the knowledge service answered HTTP {resp.status_code}")
        return resp

    async def request(
        self, method: str, path: str, credential: str | None, **kwargs: Any
    ) -> httpx.Response:
        """Any route's raw response (the wiki tools read its status and detail); a
        transport failure raises :class:`KnowledgeUnavailable`."""
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        try:
            return await self._client().request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise KnowledgeUnavailable(
                f"the knowledge service is unavailable ({type(exc).__name__}); try again"
            ) from None

    async def search(
        self,
        tenant_id: str,
        kb_ids: list[str],
        query: str,
        mode: SearchMode,
        limit: int,
        *,
        credential: str | None,
        document_ids: list[str] | None = None,
        faq_tags: list[str] | None = None,
        faq_score_boost: float | None = None,
    ) -> SearchReport:
        """The ``search_knowledge`` pipeline, run by knowledge over ``kb_ids`` (all the
        tenant's KBs when empty); under a mention (SPEC A-11) only ``document_ids`` and
        the FAQ entries tagged one of ``faq_tags``; FAQ entries first when
        ``faq_score_boost`` is given (SPEC C-04)."""
        body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "query": query,
                "mode": mode.value, "limit": limit, "document_ids": document_ids or [],
                "faq_tags": faq_tags or [], "faq_score_boost": faq_score_boost}  # fmt: skip
        resp = await self._send("POST", "/internal/search", credential, json=body)
        if resp is None:
            raise NoIndexInScope("no knowledge base in scope has indexed content")
        data = resp.json()
        return SearchReport(
            results=[Candidate(**hit) for hit in data["results"]],
            requested_mode=SearchMode(data["requested_mode"]),
            mode_fallbacks=list(data.get("mode_fallbacks") or []),
            rerank_rejected=bool(data.get("rerank_rejected")),
        )

    async def document(
        self, tenant_id: str, kb_ids: list[str], doc_id: str, *, credential: str | None
    ) -> DocumentInfo | None:
        """The document if it is in scope."""
        params = httpx.QueryParams([("tenant_id", tenant_id), *(("kb_id", k) for k in kb_ids)])
        resp = await self._send("GET", f"/internal/documents/{_q(doc_id)}", credential,
                                params=params)  # fmt: skip
        return None if resp is None else DocumentInfo(**resp.json())

    async def chunks(
        self, tenant_id: str, doc_id: str, *, start: int = 0, limit: int = 5000,
        credential: str | None,
    ) -> list[ChunkRow]:  # fmt: skip
        """Chunks of a document in reading order from position ``start``."""
        params = {"tenant_id": tenant_id, "start": start, "limit": limit}
        path = f"/internal/documents/{_q(doc_id)}/chunks"
        resp = await self._send("GET", path, credential, params=params)
        return [] if resp is None else [ChunkRow(**row) for row in resp.json()]

    async def chunk(
        self, tenant_id: str, kb_ids: list[str], chunk_id: str, *, credential: str | None
    ) -> Candidate | None:
        """One chunk in scope, with its document's title."""
        body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "chunk_ids": [chunk_id]}
        resp = await self._send("POST", "/internal/chunks", credential, json=body)
        hits = [] if resp is None else resp.json()
        if not hits:
            return None
        hit = hits[0]
        return Candidate(
            chunk_id=hit["chunk_id"], document_id=hit["document_id"],
            knowledge_base_id=hit["knowledge_base_id"], title=hit["title"],
            content=hit["content"], position=hit["position"],
        )  # fmt: skip

    async def list_documents(
        self, tenant_id: str, kb_ids: list[str], *, keyword: str = "", page: int = 1,
        size: int = 20, credential: str | None, document_ids: list[str] | None = None,
    ) -> tuple[int, list[DocumentInfo]]:  # fmt: skip
        """(total in scope, one page of documents), newest first; only ``document_ids``
        when given (a mention's, SPEC A-11: filtered before the page is cut)."""
        if document_ids is not None:
            body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "keyword": keyword,
                    "page": page, "size": size, "document_ids": document_ids}  # fmt: skip
            resp = await self._send("POST", "/internal/documents/listing", credential, json=body)
        else:
            pairs: list[tuple[str, str | int | float | bool | None]] = [
                ("tenant_id", tenant_id), ("keyword", keyword), ("page", page),
                ("size", size), *(("kb_id", k) for k in kb_ids),
            ]  # fmt: skip
            resp = await self._send(
                "GET", "/internal/documents", credential, params=httpx.QueryParams(pairs)
            )
        if resp is None:
            return 0, []
        data = resp.json()
        return int(data["total"]), [DocumentInfo(**d) for d in data["items"]]

    async def file(
        self, tenant_id: str, doc_id: str, *, credential: str | None
    ) -> tuple[str, bytes] | None:
        """(file name, bytes) of an uploaded document of the tenant."""
        path = f"/internal/documents/{_q(doc_id)}/file"
        resp = await self._send("GET", path, credential, params={"tenant_id": tenant_id})
        if resp is None:
            return None
        return unquote(resp.headers.get(FILE_NAME_HEADER, "")), resp.content

    async def graph_query(
        self, tenant_id: str, kb_ids: list[str], query: str, *, credential: str | None
    ) -> list[dict[str, Any]]:
        """``query_knowledge_graph``: one answer per KB (its hits, or its ``error``)."""
        body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "query": query}
        resp = await self._send("POST", "/internal/graph/query", credential, json=body)
        if resp is None:
            raise KnowledgeUnavailable("the knowledge service has no graph query route")
        results: list[dict[str, Any]] = resp.json()["results"]
        return results

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _q(value: str) -> str:
    return quote(value, safe="")


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return str(detail)

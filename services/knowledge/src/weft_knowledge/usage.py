"""Usage knowledge causes, metered through memory (usage is memory's table), with
knowledge's own service credential.

``PUT /internal/usage/documents/{document_id}`` is idempotent on the document: the
service sends it when a document is queued, and a worker sends it again when it finishes
the document, so a document queued while memory was unreachable is still counted, and
counted once. ``PUT /internal/usage/model-calls/{source_id}`` meters the model calls of
ingestion-time work (wiki pages, graph extraction), idempotent on ``source_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import structlog
from weft_platform.internal_auth import bearer
from weft_platform.tracing import service_client

log = structlog.get_logger(__name__)

USAGE_WRITE_SCOPE = "memory:usage.write"
"""The scope of knowledge's service credential on memory's usage route."""


class _UsageClient:
    """One idempotent ``PUT`` of a usage row to memory."""

    def __init__(
        self,
        base_url: str,
        credential: Callable[[], str],
        *,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._credential = credential
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def _put(self, kind: str, key: str, body: dict[str, Any]) -> bool:
        """``PUT /internal/usage/{kind}/{key}``; False (logged, never raised) when memory
        did not take it."""
        path = f"/internal/usage/{kind}/{quote(key, safe='')}"
        try:
            resp = await self._http.put(path, json=body, headers=bearer(self._credential()))
        except httpx.HTTPError as exc:
            log.warning("usage_unsent", kind=kind, key=key, error=repr(exc))
            return False
        if resp.status_code >= 300:
            log.warning("usage_refused", kind=kind, key=key, status=resp.status_code)
            return False
        return True

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


class DocumentUsage(_UsageClient):
    """Sends ingestion usage (a document and its bytes) to memory."""

    async def record(
        self, *, tenant_id: str, document_id: str, user_id: str, size_bytes: int
    ) -> bool:
        """Meter one document; False (logged) when memory did not take it: the worker's
        call at the document's end tries again."""
        body = {"tenant_id": tenant_id, "user_id": user_id, "size_bytes": size_bytes}
        return await self._put("documents", document_id, body)


class ModelUsage(_UsageClient):
    """Sends the model calls knowledge makes at ingestion (wiki pages, graph extraction)
    to memory's usage; idempotent on ``source_id``."""

    async def record(
        self, *, tenant_id: str, source: str, source_id: str, input_tokens: int,
        output_tokens: int, llm_calls: int,
    ) -> bool:  # fmt: skip
        """Meter one batch of calls; False (logged) when memory did not take it."""
        body = {"tenant_id": tenant_id, "source": source, "input_tokens": input_tokens,
                "output_tokens": output_tokens, "llm_calls": llm_calls}  # fmt: skip
        return await self._put("model-calls", source_id, body)

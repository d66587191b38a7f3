"""The knowledge service's wiki routes as tool-exec's wiki tools reach them (SPEC T-18).

The same pooled connections and credentials as the other knowledge tools
(:class:`~weft_tools.knowledge_client.KnowledgeClient`): the turn's credential, or
tool-exec's own for a shared agent's reads. A refusal of knowledge (no such page, a slug
taken, a text that does not occur once, an invalid regex, a KB without a writable wiki)
is a :class:`WikiRefused` whose text the model reads and can act on; knowledge being down
is a :class:`KnowledgeUnavailable`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from weft_tool_catalog.registry import ToolInvocation

from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable


class WikiRefused(Exception):
    """knowledge refused the wiki call; ``str()`` says why (safe to show the model)."""


class WikiClient:
    """knowledge's ``/internal/wiki`` routes for one tool call."""

    def __init__(self, knowledge: KnowledgeClient):
        self._knowledge = knowledge

    async def call(self, call: ToolInvocation, method: str, path: str, **kwargs: Any) -> Any:
        """The route's JSON answer for ``call`` (its tenant and credential)."""
        credential = self._knowledge.credential_for(call)
        resp = await self._knowledge.request(method, path, credential, **kwargs)
        if resp.status_code >= 500:
            raise KnowledgeUnavailable(f"the knowledge service answered HTTP {resp.status_code}")
        if resp.status_code >= 400:
            raise WikiRefused(_detail(resp))
        return resp.json()

    async def post(self, call: ToolInvocation, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` with the call's tenant."""
        return await self.call(call, "POST", path, json={"tenant_id": call.tenant_id, **body})

    async def issue(self, call: ToolInvocation, issue_id: str, kb_ids: list[str]) -> Any:
        """One issue in reach."""
        params = httpx.QueryParams([("tenant_id", call.tenant_id), *(("kb_id", k) for k in kb_ids)])
        return await self.call(
            call, "GET", f"/internal/wiki/issues/{quote(issue_id, safe='')}", params=params
        )

    async def issues(self, call: ToolInvocation, kb_ids: list[str], slug: str | None) -> Any:
        """Pending issues of a page (of every page without ``slug``)."""
        pairs: list[tuple[str, str | int | float | bool | None]] = [
            ("tenant_id", call.tenant_id),
            ("status", "pending"),
            *(("kb_id", k) for k in kb_ids),
        ]
        if slug is not None:
            pairs.append(("slug", slug))
        return await self.call(
            call, "GET", "/internal/wiki/issues", params=httpx.QueryParams(pairs)
        )


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}"
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # a validation error: each field and why
        parts = []
        for item in detail[:5]:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", [])[1:])
                parts.append(f"{where}: {item.get('msg', '')}")
        return "; ".join(parts) or "invalid arguments"
    return str(detail)[:500]

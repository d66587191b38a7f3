"""``web_search`` behind a provider interface (SPEC T-13).

One real provider is included (Brave Search API, configured by an API key); tests use a
local fake. ``count`` is capped at 20; ``country``/``freshness`` are passed to providers
that support them; with ``content=true`` the top 3 results are fetched in parallel through
``web_fetch``'s SSRF-safe client (15 s, 5000 characters each).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from weft_tools.registry import ToolInvocation, ToolOutcome, ToolSpec, dumps
from weft_tools.safe_http import BlockedAddress, SafeHttpClient
from weft_tools.web_fetch import page_text

MAX_COUNT = 20
CONTENT_PAGES = 3
CONTENT_CHARS = 5000
CONTENT_TIMEOUT_S = 15.0


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    """One web result."""

    title: str
    url: str
    snippet: str


class SearchProvider(Protocol):
    """A web search engine."""

    name: str

    async def search(
        self, query: str, count: int, *, country: str | None, freshness: str | None
    ) -> list[SearchHit]:
        """Up to ``count`` results for ``query``."""
        ...


class BraveSearchProvider:
    """Brave Search API (https://api.search.brave.com), key from configuration."""

    name = "brave"

    def __init__(self, api_key: str, *, base_url: str = "https://api.search.brave.com"):
        self._api_key = api_key
        self._base_url = base_url

    async def search(
        self, query: str, count: int, *, country: str | None, freshness: str | None
    ) -> list[SearchHit]:
        """Call ``/res/v1/web/search``."""
        params: dict[str, Any] = {"q": query, "count": count}
        if country:
            params["country"] = country
        if freshness:
            params["freshness"] = freshness
        headers = {"X-Subscription-Token": self._api_key, "Accept": "application/json"}
        async with httpx.AsyncClient(base_url=self._base_url, timeout=15) as client:
            response = await client.get("/res/v1/web/search", params=params, headers=headers)
            response.raise_for_status()
        results = response.json().get("web", {}).get("results", [])
        return [
            SearchHit(title=r.get("title", ""), url=r["url"], snippet=r.get("description", ""))
            for r in results[:count]
            if r.get("url")
        ]


WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web. Set content=true to also read the top 3 pages.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "default": 5},
            "country": {"type": "string"},
            "freshness": {"type": "string"},
            "content": {"type": "boolean", "default": False},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


class WebSearchTool:
    """Searches through the configured provider."""

    spec = WEB_SEARCH

    def __init__(self, provider: SearchProvider, client: SafeHttpClient):
        self._provider = provider
        self._client = client

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Search, optionally read the top pages."""
        args = call.arguments
        try:
            hits = await self._provider.search(
                str(args["query"]),
                min(int(args.get("count", 5)), MAX_COUNT),
                country=args.get("country"),
                freshness=args.get("freshness"),
            )
        except httpx.HTTPError as exc:
            return ToolOutcome(success=False, error=f"web_search failed: {type(exc).__name__}")
        results: list[dict[str, Any]] = [
            {"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits
        ]
        if args.get("content"):
            pages = await asyncio.gather(
                *(self._content(r["url"]) for r in results[:CONTENT_PAGES])
            )
            for result, page in zip(results, pages, strict=False):
                result.update(page)
        return ToolOutcome(
            success=True,
            output=dumps(
                {"query": args["query"], "provider": self._provider.name, "results": results}
            ),
            display_type="web_search_results",
        )

    async def _content(self, url: str) -> dict[str, str]:
        try:
            page = await self._client.get(url, CONTENT_TIMEOUT_S)
        except (BlockedAddress, TimeoutError, httpx.HTTPError) as exc:
            return {"content_error": str(exc) or type(exc).__name__}
        return {"content": page_text(page)[:CONTENT_CHARS]}

"""``web_search`` behind a provider interface (SPEC T-13).

One real provider is included (Brave Search API, configured by an API key and a base URL);
tests use a local fake speaking its API. Provider failures (HTTP errors, timeouts, bad
JSON) and a missing key become tool errors the model reads, never exceptions. ``count``
is capped at 20; ``country``/``freshness`` are passed to providers that support them;
with ``content=true`` the top 3 results are fetched in parallel through ``web_fetch``'s
SSRF-safe client (15 s, 5000 characters each).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from weft_mcp_client.safe_http import BlockedAddress, SafeHttpClient, tls_context
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import WEB_SEARCH, WEB_SEARCH_MAX_COUNT, WebSearchArguments

from weft_tools.web_fetch import page_text

CONTENT_PAGES = 3
CONTENT_CHARS = 5000
CONTENT_TIMEOUT_S = 15.0


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    """One web result."""

    title: str
    url: str
    snippet: str


class SearchProviderError(Exception):
    """The provider could not answer; the message is written for the model to read."""


class SearchProvider(Protocol):
    """A web search engine."""

    name: str

    async def search(
        self, query: str, count: int, *, country: str | None, freshness: str | None
    ) -> list[SearchHit]:
        """Up to ``count`` results for ``query``; raise SearchProviderError on failure."""
        ...


class BraveSearchProvider:
    """Brave Search API (``GET /res/v1/web/search``), key and base URL from configuration."""

    name = "brave"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = "https://api.search.brave.com",
        timeout_s: float = 15.0,
    ):
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s

    async def search(
        self, query: str, count: int, *, country: str | None, freshness: str | None
    ) -> list[SearchHit]:
        """Call the API; map every failure to a SearchProviderError the model can read."""
        params: dict[str, Any] = {"q": query, "count": count}
        if country:
            params["country"] = country
        if freshness:
            params["freshness"] = freshness
        headers = {"X-Subscription-Token": self._api_key, "Accept": "application/json"}
        try:
            async with httpx.AsyncClient(
                base_url=self._base_url, timeout=self._timeout_s, verify=tls_context()
            ) as c:
                response = await c.get("/res/v1/web/search", params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise SearchProviderError(
                f"the {self.name} search API did not answer within {self._timeout_s:g}s"
            ) from exc
        except httpx.HTTPError as exc:
            raise SearchProviderError(
                f"the {self.name} search API is unreachable ({type(exc).__name__})"
            ) from exc
        if response.status_code != 200:
            raise SearchProviderError(_status_error(self.name, response))
        return _brave_hits(response, count)


def _status_error(provider: str, response: httpx.Response) -> str:
    """A readable error for a non-200 answer, with the provider's own detail if any."""
    status = response.status_code
    reason = {
        401: "the API key was rejected",
        403: "the API key may not use this endpoint",
        422: "the provider refused the parameters",
        429: "the provider's rate limit was reached; try again later",
    }.get(status, "the provider failed" if status >= 500 else "the request was refused")
    detail = ""
    try:
        error = response.json().get("error", {})
        detail = str(error.get("detail") or error.get("message") or "")[:300]
    except (ValueError, AttributeError):
        pass
    return f"the {provider} search API answered HTTP {status}: {reason}" + (
        f" ({detail})" if detail else ""
    )


def _brave_hits(response: httpx.Response, count: int) -> list[SearchHit]:
    try:
        body = response.json()
        results = body.get("web", {}).get("results", []) if isinstance(body, dict) else None
    except ValueError as exc:
        raise SearchProviderError("the brave search API answered with invalid JSON") from exc
    if not isinstance(results, list):
        raise SearchProviderError("the brave search API answered in an unexpected shape")
    return [
        SearchHit(
            title=str(r.get("title", "")), url=str(r["url"]), snippet=str(r.get("description", ""))
        )
        for r in results[:count]
        if isinstance(r, dict) and r.get("url")
    ]


NOT_CONFIGURED = (
    "web_search is not available: no search provider API key is configured on this "
    "deployment (WEFT_WEB_SEARCH_API_KEY). Answer from other sources or tell the user."
)


class WebSearchTool:
    """Searches through the configured provider (None: every call explains it is not set up)."""

    spec = WEB_SEARCH

    def __init__(self, provider: SearchProvider | None, client: SafeHttpClient):
        self._provider = provider
        self._client = client

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Search, optionally read the top pages."""
        if self._provider is None:
            return ToolOutcome(success=False, error=NOT_CONFIGURED)
        args = call.args(WebSearchArguments)
        try:
            hits = await self._provider.search(
                args.query,
                min(args.count, WEB_SEARCH_MAX_COUNT),
                country=args.country,
                freshness=args.freshness,
            )
        except SearchProviderError as exc:
            return ToolOutcome(success=False, error=f"web_search failed: {exc}")
        results: list[dict[str, Any]] = [
            {"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits
        ]
        if args.content:
            pages = await asyncio.gather(
                *(self._content(r["url"]) for r in results[:CONTENT_PAGES])
            )
            for result, page in zip(results, pages, strict=False):
                result.update(page)
        return ToolOutcome(
            success=True,
            output=dumps(
                {"query": args.query, "provider": self._provider.name, "results": results}
            ),
            display_type="web_search_results",
        )

    async def _content(self, url: str) -> dict[str, str]:
        try:
            page = await self._client.get(url, CONTENT_TIMEOUT_S)
        except (BlockedAddress, TimeoutError, httpx.HTTPError) as exc:
            return {"content_error": str(exc) or type(exc).__name__}
        return {"content": page_text(page)[:CONTENT_CHARS]}

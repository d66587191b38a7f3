"""web_search through the Brave provider against a local fake of its API (SPEC T-13).

The fake (``weft_testkit.fake_search``) speaks Brave's request and response shapes on
127.0.0.1; loopback is reachable for ``content=true`` only through an explicit
``AddressPolicy(allow_loopback=True)``. Every provider failure must come back as a tool
error the model can read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from weft_contracts import ToolContext
from weft_mcp_client.safe_http import AddressPolicy, SafeHttpClient
from weft_testkit.fake_search import FakeBraveSearch
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry
from weft_tools.web_search import NOT_CONFIGURED, BraveSearchProvider, WebSearchTool

KEY = "fake-brave-key"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBraveSearch]:
    with FakeBraveSearch(KEY, slow_s=2.0) as server:
        yield server


def _registry(fake: FakeBraveSearch, *, key: str | None = KEY) -> ToolRegistry:
    provider = None
    if key is not None:
        provider = BraveSearchProvider(key, base_url=fake.base_url, timeout_s=0.5)
    registry = ToolRegistry()
    client = SafeHttpClient(policy=AddressPolicy(allow_loopback=True))
    registry.register(WebSearchTool(provider, client))
    return registry


async def _search(registry: ToolRegistry, **args: object) -> ToolOutcome:
    call = ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments=dict(args),
        context=ToolContext(user_id="u", agent_id="a"),
    )  # fmt: skip
    return await registry.execute("web_search", call)


async def test_results_come_from_the_provider_api(fake: FakeBraveSearch) -> None:  # SPEC T-13
    result = await _search(
        _registry(fake), query="kafka tuning", count="3", country="DE", freshness="pw"
    )
    assert result.success, result.error
    body = json.loads(result.output)
    assert body["provider"] == "brave" and len(body["results"]) == 3
    assert body["results"][0]["title"] == "kafka tuning result 1"
    assert body["results"][0]["snippet"] == "Snippet 1 about kafka tuning."
    sent = fake.state.requests[-1]
    assert sent["params"] == {"q": "kafka tuning", "count": "3", "country": "DE", "freshness": "pw"}
    assert sent["headers"]["X-Subscription-Token"] == KEY


async def test_content_reads_the_top_three_pages(fake: FakeBraveSearch) -> None:  # SPEC T-13
    result = await _search(_registry(fake), query="pages", count=5, content=True)
    results = json.loads(result.output)["results"]
    assert [("Body of page" in r.get("content", "")) for r in results] == [True] * 3 + [False] * 2


async def test_count_above_twenty_is_refused(fake: FakeBraveSearch) -> None:  # SPEC T-13
    result = await _search(_registry(fake), query="x", count=50)
    assert not result.success and "count" in str(result.error)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("boom", "HTTP 500: the provider failed (Something went wrong on our side.)"),
        ("slow", "did not answer within 0.5s"),
        ("garbled", "invalid JSON"),
        ("refused", "HTTP 422: the provider refused the parameters"),
    ],
)
async def test_provider_failures_are_readable_tool_errors(
    fake: FakeBraveSearch, query: str, expected: str
) -> None:  # SPEC T-13, STYLE principle 4
    result = await _search(_registry(fake), query=query)
    assert not result.success
    assert result.error is not None and result.error.startswith(
        "web_search failed: the brave search API"
    )
    assert expected in result.error


async def test_a_wrong_or_missing_api_key_is_explained(fake: FakeBraveSearch) -> None:  # SPEC T-13
    wrong = await _search(_registry(fake, key="not-the-key"), query="x")
    assert not wrong.success and "HTTP 401: the API key was rejected" in str(wrong.error)
    missing = await _search(_registry(fake, key=None), query="x")
    assert not missing.success and missing.error == NOT_CONFIGURED


async def test_an_unreachable_provider_is_a_tool_error() -> None:  # SPEC T-13
    provider = BraveSearchProvider(KEY, base_url="http://127.0.0.1:9", timeout_s=2)
    registry = ToolRegistry()
    registry.register(WebSearchTool(provider, SafeHttpClient()))
    result = await _search(registry, query="x")
    assert not result.success and "unreachable" in str(result.error)

"""web_search run by a tool-exec worker over the real Kafka, against a local fake of the
Brave Search API configured through the service's settings (SPEC T-13).

The worker gets the fake's base URL and key from ``WEFT_WEB_SEARCH_*``; loopback is
reachable for ``content=true`` only through the explicit test setting
``WEFT_WEB_FETCH_ALLOW_LOOPBACK``. Provider failures come back as failed tool results
with a readable error, and the worker keeps serving calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from weft_testkit.fake_search import FakeBraveSearch
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool

LOG_DIR = Path(".weft/logs/e2e")
KEY = "fake-brave-key"


@pytest.fixture
def fake() -> Iterator[FakeBraveSearch]:
    with FakeBraveSearch(KEY, slow_s=5.0) as server:
        yield server


def _pool(env: dict[str, str]) -> ToolWorkerPool:
    return ToolWorkerPool(LOG_DIR, partitions=2, extra_env={"WEFT_TOOL_CONCURRENCY": "4", **env})


async def test_web_search_through_a_worker_with_provider_failures(
    infra: dict[str, str], fake: FakeBraveSearch
) -> None:  # SPEC T-13
    pool = _pool({
        "WEFT_WEB_SEARCH_API_KEY": KEY, "WEFT_WEB_SEARCH_BASE_URL": fake.base_url,
        "WEFT_WEB_SEARCH_TIMEOUT_S": "1", "WEFT_WEB_FETCH_ALLOW_LOOPBACK": "true",
    })  # fmt: skip
    try:
        pool.start("worker-a")
        async with ToolCallClient(pool.prefix) as client:
            queries = ["kafka consumer groups", "boom", "slow", "garbled"]
            ids = {
                q: await client.send("web_search", {"query": q, "count": 4, "content": True})
                for q in queries
            }
            await client.wait_for(list(ids.values()), timeout_s=120)
    finally:
        pool.stop()
    results = {q: client.results[call_id][0] for q, call_id in ids.items()}
    ok = results["kafka consumer groups"]
    assert ok["success"], ok
    found = json.loads(ok["output"])["results"]
    assert [r["title"] for r in found][:2] == [
        "kafka consumer groups result 1",
        "kafka consumer groups result 2",
    ]
    assert all("Body of page" in r["content"] for r in found[:3]) and "content" not in found[3]
    errors = {q: results[q]["error"] for q in ("boom", "slow", "garbled")}
    assert all(not results[q]["success"] for q in errors)
    assert "HTTP 500" in errors["boom"]
    assert "did not answer within 1s" in errors["slow"]
    assert "invalid JSON" in errors["garbled"]
    assert all(e.startswith("web_search failed: the brave search API") for e in errors.values())


async def test_a_worker_without_a_search_key_explains_it(infra: dict[str, str]) -> None:
    """SPEC T-13: no provider configured is a tool error the model reads, not unknown tool."""
    pool = _pool({"WEFT_WEB_SEARCH_API_KEY": ""})
    try:
        pool.start("worker-a")
        async with ToolCallClient(pool.prefix) as client:
            call_id = await client.send("web_search", {"query": "anything"})
            await client.wait_for([call_id], timeout_s=120)
    finally:
        pool.stop()
    result = client.results[call_id][0]
    assert not result["success"] and "no search provider API key" in result["error"]

"""Fixtures of the e2e and security suites: a whole Weft stack (separate OS processes) on the
real Kafka, PostgreSQL and Redis, isolated by a topic prefix; loaded by tests/conftest.py."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from weft_testkit import LocalStack, StackConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    """Seven services + the scripted LLM test double, isolated by a topic prefix."""
    home = Path(os.environ.get("WEFT_HOME", REPO / ".weft"))
    with LocalStack(StackConfig(log_dir=home / "logs" / "e2e")) as running:
        yield running


@pytest.fixture
async def api(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the public API, authenticated as the stack's tenant."""
    async with stack.api_client() as c:
        yield c


@pytest.fixture
async def llm(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    """Control API of the scripted LLM; reset to the demo policy (and an empty request
    log) before and after each test, so turns of earlier tests that did not use this
    fixture never show up in a test's ``chat_requests``."""
    async with httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as c:
        await c.post("/_reset")
        yield c
        await c.post("/_reset")


@pytest.fixture
async def knowledge_base(api: httpx.AsyncClient) -> str:
    """A knowledge base of this test's tenant, loaded with the shipped sample documents."""
    resp = await api.post("/api/v1/knowledge-bases", json={"name": "sample"})
    assert resp.status_code == 201, resp.text
    kb_id: str = resp.json()["id"]
    for doc in sorted((REPO / "deploy" / "sample-kb").glob("*.md")):
        body = {"title": doc.stem, "content": doc.read_text(), "file_name": doc.name}
        added = await api.post(f"/api/v1/knowledge-bases/{kb_id}/documents", json=body)
        assert added.status_code == 201, added.text
    return kb_id

"""Fixtures of the e2e and security suites: a whole Weft stack (separate OS processes) on the
real Kafka, PostgreSQL and Redis, isolated by a topic prefix; loaded by tests/conftest.py."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import ApiKeyAuth
from weft_testkit import LocalStack, StackConfig

REPO = Path(__file__).resolve().parents[1]


def weft_home() -> Path:
    """``WEFT_HOME`` (what ``make`` exports), else the repository's ``.weft``."""
    return Path(os.environ.get("WEFT_HOME") or REPO / ".weft")


def per_worker(name: str) -> str:
    """``name``, suffixed with the pytest-xdist worker's id when there is one: each worker
    starts its own session stacks, which must not share folders."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{name}-{worker}" if worker else name


def stack_log_dir(name: str) -> Path:
    """Where a stack named ``name`` logs (and keeps its credential keys)."""
    return weft_home() / "logs" / per_worker(name)


SANDBOX_SHARES_ENV = {
    "WEFT_SANDBOX_CONCURRENCY": "3",
    "WEFT_SANDBOX_READ_AHEAD": "8",
    "WEFT_SANDBOX_PARTITION_READ_AHEAD": "2",
}
"""The stack's sandbox: three runners (a tenant holds two at most) and a read-ahead of two
calls per partition, small enough that tests/security/test_sandbox_fairness.py floods them
with a few calls (docs/fairness.md, "Sandbox calls")."""
SANDBOX_TENANT_BYTES = 8 * 1024 * 1024
"""The stack's sandbox holds each tenant's live workspaces to 8 MiB in all: the tests write
kilobytes, and tests/security/test_sandbox_workspace_caps.py fills the cap with tenants of
its own (small, so it stays quick; a restart with other settings would cost ~20 s)."""


def stack_spans_file() -> Path:
    """Where the shared stack's processes append their spans (``stack_tracing_env``)."""
    return stack_log_dir("e2e") / "spans.jsonl"


def stack_tracing_env() -> dict[str, str]:
    """The shared stack records only traces a client asked for: every process writes spans
    to one file, new traces are sampled at 0 and the gateway continues a client's
    ``traceparent``, so a test that sends one with the sampled flag gets its whole trace
    (tests/e2e/test_trace_tree.py) and every other turn costs what an unsampled one does."""
    return {
        "WEFT_TRACING_EXPORTER": "file",
        "WEFT_TRACING_FILE": str(stack_spans_file()),
        "WEFT_TRACING_SAMPLE_RATIO": "0",
        "WEFT_TRACING_TRUST_INCOMING": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms: a test sees the spans soon after the turn
    }


@pytest.fixture(scope="session")
def stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    """Seven services + the scripted LLM test double, isolated by a topic prefix."""
    env = {
        **SANDBOX_SHARES_ENV,
        "WEFT_SANDBOX_TENANT_BYTES": str(SANDBOX_TENANT_BYTES),
        **stack_tracing_env(),
        # The web console, when built (deploy/local/ensure-console.sh): tests/browser drive it.
        "WEFT_CONSOLE_DIR": str(REPO / "console" / "dist"),
    }
    with LocalStack(StackConfig(log_dir=stack_log_dir("e2e"), extra_env=env)) as running:
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


@dataclass(frozen=True)
class KeyedClient:
    """A client of the public API authenticated with its own key (``key`` is what
    ``read_turn`` needs)."""

    key: str
    http: httpx.AsyncClient


@dataclass(frozen=True)
class ApiKeys:
    """Registers API keys on the stack's database, the gateway's own way (SHA-256 only)."""

    stack: LocalStack
    auth: ApiKeyAuth
    clients: AsyncExitStack

    async def client(
        self,
        *,
        tenant: str | None = None,
        user: str = "dev",
        knowledge_base_ids: list[str] | None = None,
    ) -> KeyedClient:
        """A new key of ``tenant`` (default: the stack's) and ``user``, limited to
        ``knowledge_base_ids`` when given (SPEC A-09), and a client using it."""
        key = f"key-{secrets.token_hex(16)}"
        await self.auth.register(
            tenant or self.stack.tenant, user, key, "test key", knowledge_base_ids
        )
        headers = {"Authorization": f"Bearer {key}"}
        http = httpx.AsyncClient(base_url=self.stack.gateway_url, headers=headers, timeout=60)
        return KeyedClient(key, await self.clients.enter_async_context(http))


@pytest.fixture
async def api_keys(stack: LocalStack, infra: dict[str, str]) -> AsyncIterator[ApiKeys]:
    """Issues keys of any tenant, user and KB list on the stack; clients closed after the test."""
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with AsyncExitStack() as clients:
            yield ApiKeys(stack, ApiKeyAuth(async_sessionmaker(engine)), clients)
    finally:
        await engine.dispose()


LIMITS_ENV = {
    "WEFT_TOKEN_BUDGET_PER_MINUTE": "5000",
    "WEFT_SSE_MAX_PER_TENANT": "2",
    "WEFT_HEADER_READ_TIMEOUT_S": "2",
}
"""The limits stack: 5,000 tokens per tenant per minute, 2 open SSE streams per tenant,
request heads complete within 2 s (docs/budgets.md)."""


@pytest.fixture(scope="session")
def limits_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    """A stack whose gateway and engine enforce small budgets and caps (``LIMITS_ENV``),
    shared by tests/security/test_budgets.py and test_connection_limits.py."""
    config = StackConfig(log_dir=stack_log_dir("e2e-limits"), extra_env=LIMITS_ENV)
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def limits_llm(limits_stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    """The limits stack's scripted LLM, reset before and after the test."""
    async with httpx.AsyncClient(base_url=limits_stack.llm_url, timeout=30) as c:
        await c.post("/_reset")
        yield c
        await c.post("/_reset")


@pytest.fixture
async def limits_keys(limits_stack: LocalStack, infra: dict[str, str]) -> AsyncIterator[ApiKeys]:
    """Keys of any tenant on the limits stack."""
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with AsyncExitStack() as clients:
            yield ApiKeys(limits_stack, ApiKeyAuth(async_sessionmaker(engine)), clients)
    finally:
        await engine.dispose()

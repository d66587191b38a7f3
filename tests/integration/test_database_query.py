"""database_query on the real PostgreSQL: SELECT only, whitelist, tenant scoping (SPEC T-11)."""

from __future__ import annotations

import json
import secrets

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_contracts import ToolContext
from weft_storage.knowledge.store import KnowledgeStore
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.database_query import DatabaseQueryTool, QueryLimits


@pytest.fixture
async def tenants(engine: AsyncEngine) -> tuple[str, str]:
    store = KnowledgeStore(async_sessionmaker(engine))
    mine, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(mine, "mine")
    await store.add_document(mine, kb, "Refunds", "Annual plans are refunded within 30 days.")
    other_kb = await store.create_knowledge_base(other, "theirs")
    await store.add_document(other, other_kb, "Secret", "The other tenant's secret plan.")
    return mine, other


async def _query(engine: AsyncEngine, tenant: str, sql: str) -> tuple[bool, str]:
    registry = ToolRegistry()
    registry.register(
        DatabaseQueryTool(async_sessionmaker(engine), limits=QueryLimits(timeout_ms=2000))
    )
    call = ToolInvocation(
        tenant_id=tenant,
        session_id="s",
        request_id="r",
        arguments={"sql": sql},
        context=ToolContext(user_id="u", agent_id="a"),
    )
    outcome = await registry.execute("database_query", call)
    return outcome.success, outcome.output if outcome.success else str(outcome.error)


async def test_select_sees_only_the_callers_rows(  # SPEC T-11
    engine: AsyncEngine, tenants: tuple[str, str]
) -> None:
    mine, _ = tenants
    ok, out = await _query(
        engine,
        mine,
        "SELECT d.title, c.content FROM documents d JOIN chunks c ON c.document_id = d.id",
    )
    assert ok, out
    rows = json.loads(out)["rows"]
    assert rows == [["Refunds", "Annual plans are refunded within 30 days."]]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM documents WHERE tenant_id <> 'x' OR 1=1",
        "SELECT count(*) FROM chunks WHERE content LIKE '%secret%'",
        "WITH all_docs AS (SELECT * FROM documents) SELECT * FROM all_docs WHERE title = 'Secret'",
        "SELECT (SELECT count(*) FROM documents d2 WHERE d2.title = 'Secret')",
    ],
)
async def test_other_tenants_rows_stay_invisible(  # SPEC T-11, invariant 5
    engine: AsyncEngine, tenants: tuple[str, str], sql: str
) -> None:
    mine, _ = tenants
    ok, out = await _query(engine, mine, sql)
    assert ok, out
    assert "secret" not in out.lower().replace("%secret%", "")
    assert "Secret" not in out


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; DROP TABLE chunks",
        "SELECT 1 -- harmless\n; DELETE FROM chunks",
        "/* x */ DELETE FROM chunks",
        "WITH gone AS (DELETE FROM chunks RETURNING *) SELECT * FROM gone",
        "SELECT pg_sleep(30)",
        "SELECT * FROM api_keys",
        "SELECT * FROM pg_catalog.pg_user",
        "SELECT * INTO stolen FROM chunks",
        "UPDATE documents SET title = 'x'",
        "SELECT * FROM chunks FOR UPDATE",
    ],
)
async def test_adversarial_sql_is_refused_and_changes_nothing(  # SPEC T-11
    engine: AsyncEngine, tenants: tuple[str, str], sql: str
) -> None:
    mine, _ = tenants
    ok, error = await _query(engine, mine, sql)
    assert not ok
    assert "refused" in error
    async with engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM chunks WHERE tenant_id = :t"), {"t": mine}
        )
    assert count == 1


async def test_slow_query_is_cut_by_the_statement_timeout(  # SPEC T-11, invariant 6
    engine: AsyncEngine, tenants: tuple[str, str]
) -> None:
    mine, _ = tenants
    registry = ToolRegistry()
    registry.register(
        DatabaseQueryTool(async_sessionmaker(engine), limits=QueryLimits(timeout_ms=200))
    )
    call = ToolInvocation(
        tenant_id=mine,
        session_id="s",
        request_id="r",
        arguments={"sql": _SLOW},
        context=ToolContext(user_id="u", agent_id="a"),
    )
    outcome = await registry.execute("database_query", call)
    assert not outcome.success
    assert "statement timeout" in str(outcome.error)


async def test_sql_literals_are_masked_for_display(  # SPEC T-11, E-23
    engine: AsyncEngine, tenants: tuple[str, str]
) -> None:
    mine, _ = tenants
    registry = ToolRegistry()
    registry.register(DatabaseQueryTool(async_sessionmaker(engine)))
    call = ToolInvocation(
        tenant_id=mine,
        session_id="s",
        request_id="r",
        arguments={"sql": "SELECT title FROM documents WHERE title = 'Refunds' LIMIT 5"},
        context=ToolContext(user_id="u", agent_id="a"),
    )
    outcome = await registry.execute("database_query", call)
    assert outcome.success
    assert "Refunds'" not in outcome.data["sql"] and "5" not in outcome.data["sql"]


_SLOW = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 100000000) "
    "SELECT count(*) FROM r"
)

"""database_query under attack on the real PostgreSQL (SPEC T-11, invariant 5).

Two layers are tested apart: the tool (parse checks in front of the database role), and the
role alone: raw SQL run as ``weft_sql_reader`` with the parse checks off, which is what any
SQL that slipped past them would get.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_contracts import ToolContext
from weft_storage.base import Base
from weft_storage.knowledge.store import KnowledgeStore
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.database_query import (
    DatabaseQueryTool,
    QueryLimits,
    enter_reader_transaction,
)


@dataclass(frozen=True)
class Tenants:
    mine: str
    other: str
    my_kbs: tuple[str, str]
    other_kb: str
    other_key_hash: str


@pytest.fixture
async def tenants(engine: AsyncEngine) -> Tenants:
    store = KnowledgeStore(async_sessionmaker(engine))
    mine, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    kb1 = await store.create_knowledge_base(mine, "mine-one")
    kb2 = await store.create_knowledge_base(mine, "mine-two")
    await store.add_document(mine, kb1, "Refunds", "Annual plans are refunded within 30 days.")
    await store.add_document(mine, kb2, "Pricing", "The team plan costs 20 euros.")
    other_kb = await store.create_knowledge_base(other, "theirs")
    await store.add_document(other, other_kb, "Secret", "The other tenant's secret plan.")
    key_hash = secrets.token_hex(32)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO api_keys (id, tenant_id, user_id, key_hash, name) "
                "VALUES (:id, :t, 'u', :h, 'k')"
            ),
            {"id": secrets.token_hex(8), "t": other, "h": key_hash},
        )
    return Tenants(mine, other, (kb1, kb2), other_kb, key_hash)


def _context(**fields: Any) -> ToolContext:
    return ToolContext(user_id="u", agent_id="a", **fields)


async def _tool(
    engine: AsyncEngine, tenant: str, sql: str, context: ToolContext | None = None, **limits: int
) -> tuple[bool, str]:
    registry = ToolRegistry()
    tool = DatabaseQueryTool(
        async_sessionmaker(engine),
        limits=QueryLimits(**limits),
        reserved=frozenset(Base.metadata.tables),
    )
    registry.register(tool)
    call = ToolInvocation(
        tenant_id=tenant,
        session_id="s",
        request_id="r",
        arguments={"sql": sql},
        context=context or _context(),
    )
    outcome = await registry.execute("database_query", call)
    return outcome.success, outcome.output if outcome.success else str(outcome.error)


async def _as_reader(
    engine: AsyncEngine, tenant: str, sql: str, kb_scope: str = "*"
) -> list[tuple[Any, ...]]:
    """``sql`` run as the reader role exactly as the tool sets it up, minus the parse checks."""
    async with async_sessionmaker(engine)() as session:
        try:
            await enter_reader_transaction(session, tenant, kb_scope, QueryLimits())
            result = await (await session.connection()).exec_driver_sql(sql)
            return [tuple(row) for row in result.fetchall()]
        finally:
            await session.rollback()


def _assert_nothing_of(tenants: Tenants, out: str) -> None:
    for leaked in (tenants.other, tenants.other_kb, "Secret", "secret plan", "theirs"):
        assert leaked not in out, f"{leaked!r} leaked: {out}"
    assert tenants.other_key_hash not in out


@pytest.mark.parametrize(
    "sql",
    [
        "WITH documents AS (SELECT * FROM api_keys) SELECT * FROM documents",
        "WITH api_keys AS (SELECT * FROM api_keys) SELECT * FROM api_keys",
        "WITH chunks AS (SELECT * FROM chunks) SELECT content FROM chunks",
        "SELECT query_to_xml('select * from api_keys', true, true, '')",
        "SELECT query_to_xml('select content from public.chunks', true, true, '')",
        "SELECT * FROM query_to_xml('select key_hash from api_keys', true, true, '') x",
        "SELECT set_config('weft.tenant_id', 'someone-else', true)",
        "SELECT set_config('role', 'weft', true), (SELECT count(*) FROM chunks)",
        "SELECT * FROM public.chunks",
    ],
)
async def test_bypasses_of_the_parse_checks_are_refused(  # SPEC T-11
    engine: AsyncEngine, tenants: Tenants, sql: str
) -> None:
    ok, error = await _tool(engine, tenants.mine, sql)
    assert not ok
    assert error.startswith("database_query refused:"), error
    _assert_nothing_of(tenants, error)


async def test_the_tool_reads_only_the_callers_rows(  # SPEC T-11, invariant 5
    engine: AsyncEngine, tenants: Tenants
) -> None:
    ok, out = await _tool(
        engine, tenants.mine, "SELECT kb.name, d.title, c.content FROM knowledge_bases kb "
        "JOIN documents d ON d.knowledge_base_id = kb.id JOIN chunks c ON c.document_id = d.id "
        "ORDER BY kb.name",
    )  # fmt: skip
    assert ok, out
    assert [row[:2] for row in json.loads(out)["rows"]] == [
        ["mine-one", "Refunds"],
        ["mine-two", "Pricing"],
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT tenant_id, title FROM weft_sql.documents",
        "SELECT tenant_id, title FROM public.documents",
        "SELECT content FROM public.chunks",
        "SELECT name, tenant_id FROM public.knowledge_bases",
        "SELECT query_to_xml('select tenant_id, content from public.chunks', true, true, '')",
        "SELECT query_to_xml('select * from weft_sql.documents', true, true, '')",
        "WITH documents AS (SELECT title, tenant_id FROM public.documents) SELECT * FROM documents",
    ],
)
async def test_the_reader_role_alone_sees_only_its_tenants_rows(  # SPEC T-11, invariant 5
    engine: AsyncEngine, tenants: Tenants, sql: str
) -> None:
    """No parse checks: the role, its views and row-level security are all that hold."""
    rows = await _as_reader(engine, tenants.mine, sql)
    out = json.dumps(rows, default=str)
    _assert_nothing_of(tenants, out)
    assert rows, "the caller's own rows are readable"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT key_hash FROM public.api_keys",
        "SELECT * FROM api_keys",
        "SELECT query_to_xml('select key_hash from public.api_keys', true, true, '')",
        "SELECT embedding FROM public.chunks",
        "SELECT * FROM public.chunks",
        "SELECT content FROM public.document_files",
        "SELECT * FROM public.agents",
        "SELECT * FROM public.messages",
    ],
)
async def test_the_reader_role_cannot_read_keys_or_other_tables(  # SPEC T-11
    engine: AsyncEngine, tenants: Tenants, sql: str
) -> None:
    with pytest.raises(DBAPIError, match=r"permission denied|does not exist"):
        await _as_reader(engine, tenants.mine, sql)


async def test_the_reader_role_without_settings_sees_nothing(  # SPEC T-11
    engine: AsyncEngine, tenants: Tenants
) -> None:
    async with engine.connect() as conn, conn.begin():
        await conn.execute(text("SET LOCAL ROLE weft_sql_reader"))
        count = await conn.scalar(text("SELECT count(*) FROM weft_sql.chunks"))
    assert count == 0


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT set_config('weft.tenant_id', 'someone-else', true)",
        "SELECT set_config('role', 'weft', true)",
    ],
)
async def test_the_reader_role_cannot_call_set_config(  # SPEC T-11, invariant 5
    engine: AsyncEngine, tenants: Tenants, sql: str
) -> None:
    """No parse checks: the reader can neither move its tenant setting nor switch back to
    the services' role (deploy/local/infra.sh revokes set_config from PUBLIC)."""
    with pytest.raises(DBAPIError, match=r"permission denied for function set_config"):
        await _as_reader(engine, tenants.mine, sql)


async def test_setting_another_tenant_is_refused_by_the_tool(  # SPEC T-11
    engine: AsyncEngine, tenants: Tenants
) -> None:
    sql = (
        f"SELECT set_config('weft.tenant_id', '{tenants.other}', true) AS t, "
        "(SELECT string_agg(content, ' ') FROM chunks) AS c"
    )
    ok, error = await _tool(engine, tenants.mine, sql)
    assert not ok and error == "database_query refused: function set_config is not allowed"
    _, counted = await _tool(engine, tenants.mine, "SELECT count(*) FROM chunks")
    assert json.loads(counted)["rows"] == [[2]]


async def test_a_heavy_cross_join_is_stopped_by_the_statement_timeout(  # SPEC T-11, inv. 6
    engine: AsyncEngine, tenants: Tenants
) -> None:
    heavy = (
        "SELECT count(*) FROM chunks a, chunks b, chunks c, chunks d, chunks e, chunks f, "
        "chunks g, chunks h, chunks i, chunks j, chunks k, chunks l, chunks m, chunks n, "
        "chunks o, chunks p, chunks q, chunks r, chunks s, chunks t, chunks u, chunks v, "
        "chunks w, chunks x, chunks y, chunks z WHERE length(a.content || z.content) > 0"
    )
    ok, error = await _tool(engine, tenants.mine, heavy, timeout_ms=300)
    assert not ok
    assert "canceling statement due to statement timeout" in error


async def test_the_row_cap_cuts_the_result_and_says_so(  # SPEC T-11
    engine: AsyncEngine, tenants: Tenants
) -> None:
    many = "SELECT c.id FROM chunks c, chunks d, knowledge_bases k, knowledge_bases l"
    ok, out = await _tool(engine, tenants.mine, many, max_rows=3)
    assert ok, out
    result = json.loads(out)
    assert result["row_count"] == 3 and len(result["rows"]) == 3
    assert result["truncated"] == "only the first 3 rows are shown"
    ok, out = await _tool(engine, tenants.mine, "SELECT id FROM chunks", max_rows=3)
    assert ok and "truncated" not in json.loads(out)
    # 2^24 rows: PostgreSQL itself stops after the cap, well inside the timeout.
    huge = "SELECT a.id FROM " + ", ".join(f"chunks c{i}" for i in range(23)) + ", chunks a"
    ok, out = await _tool(engine, tenants.mine, huge, max_rows=3, timeout_ms=3000)
    assert ok, out
    assert json.loads(out)["row_count"] == 3


@pytest.mark.parametrize(
    ("turn", "key"),
    [([0], None), ([], [0]), ([0], [0, 1])],
    ids=["turn-scope", "key-scope-agent-without-kbs", "turn-within-key"],
)
async def test_a_knowledge_scoped_call_sees_only_its_bases(  # SPEC T-11, A-09
    engine: AsyncEngine, tenants: Tenants, turn: list[int], key: list[int] | None
) -> None:
    kbs = tenants.my_kbs
    context = _context(
        knowledge_base_ids=[kbs[i] for i in turn],
        key_knowledge_base_ids=None if key is None else [kbs[i] for i in key],
    )
    for sql in (
        "SELECT name FROM knowledge_bases",
        "SELECT title FROM documents",
        "SELECT c.content FROM chunks c JOIN documents d ON d.id = c.document_id",
    ):
        ok, out = await _tool(engine, tenants.mine, sql, context)
        assert ok, out
        assert "Pricing" not in out and "20 euros" not in out and "mine-two" not in out
        assert len(json.loads(out)["rows"]) == 1
    rows = await _as_reader(engine, tenants.mine, "SELECT title FROM weft_sql.documents", kbs[0])
    assert rows == [("Refunds",)]

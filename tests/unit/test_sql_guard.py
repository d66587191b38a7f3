"""The parse-tree layer of database_query (SPEC T-11): what it refuses, what it lets through,
and where it points the tables."""

from __future__ import annotations

import pytest
from weft_contracts import ToolContext
from weft_tool_catalog.sql_guard import UnsafeQuery
from weft_tools.database_query import knowledge_scope, scoped_sql

RESERVED = frozenset({"api_keys", "agents", "sessions", "messages", "document_files"})


def _refusal(sql: str) -> str:
    with pytest.raises(UnsafeQuery) as caught:
        scoped_sql(sql, reserved=RESERVED)
    return str(caught.value)


@pytest.mark.parametrize(
    "sql",
    [
        "WITH documents AS (SELECT * FROM api_keys) SELECT * FROM documents",
        "WITH api_keys AS (SELECT * FROM api_keys) SELECT * FROM api_keys",
        "WITH chunks AS (SELECT * FROM chunks) SELECT * FROM chunks",
        "WITH a AS (SELECT 1) SELECT * FROM (WITH api_keys AS (SELECT 1) SELECT * FROM api_keys) s",
        "WITH pg_user AS (SELECT * FROM pg_user) SELECT * FROM pg_user",
        "WITH RECURSIVE Documents AS (SELECT * FROM documents) SELECT * FROM documents",
    ],
)
def test_a_cte_named_like_a_table_is_refused(sql: str) -> None:  # SPEC T-11
    assert "CTE may not be named" in _refusal(sql)


@pytest.mark.parametrize(
    ("sql", "function"),
    [
        ("SELECT query_to_xml('select * from api_keys', true, true, '')", "query_to_xml"),
        ("SELECT * FROM query_to_xml('select 1', true, true, '') x", "query_to_xml"),
        ("SELECT pg_catalog.query_to_xml('select 1', true, true, '')", "query_to_xml"),
        ("SELECT database_to_xml(true, true, '')", "database_to_xml"),
        ("SELECT title FROM documents WHERE title = query_to_xml('x', true, true, '')::text",
         "query_to_xml"),
        ("SELECT set_config('weft.tenant_id', 'other', true)", "set_config"),
        ("SELECT set_config('role', 'weft', true)", "set_config"),
        ("SELECT current_setting('weft.tenant_id')", "current_setting"),
        ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
        ("SELECT dblink('host=x', 'select 1')", "dblink"),
        ("SELECT lo_import('/etc/passwd')", "lo_import"),
        ("SELECT lo_get(1)", "lo_get"),
        ("SELECT pg_sleep(30)", "pg_sleep"),
        ("SELECT count(*) FROM documents WHERE pg_sleep(1) IS NULL", "pg_sleep"),
        ("SELECT txid_current()", "txid_current"),
        ("SELECT version()", "current_version"),
    ],
)  # fmt: skip
def test_functions_outside_the_allowlist_are_refused(sql: str, function: str) -> None:  # T-11
    assert _refusal(sql) == f"function {function} is not allowed"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT 2",
        "SELECT 1; DELETE FROM chunks",
        "DELETE FROM chunks",
        "SET ROLE weft",
        "RESET ROLE",
        "COPY chunks TO '/tmp/x'",
        "WITH gone AS (DELETE FROM chunks RETURNING *) SELECT * FROM gone",
        "SELECT * INTO stolen FROM chunks",
        "SELECT * FROM chunks FOR UPDATE",
        "SELECT * FROM api_keys",
        "SELECT * FROM public.documents",
        "SELECT * FROM weft_sql.documents",
        "SELECT * FROM pg_catalog.pg_user",
        "SELECT * FROM generate_series(1, 10)",
    ],
)
def test_anything_but_one_select_of_the_whitelist_is_refused(sql: str) -> None:  # SPEC T-11
    _refusal(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT d.title, c.content FROM documents d JOIN chunks c ON c.document_id = d.id",
        "SELECT knowledge_base_id, count(*) AS n, sum(size_bytes), avg(chunk_count), "
        "min(created_at), max(updated_at) FROM documents GROUP BY 1 ORDER BY n DESC LIMIT 10",
        "SELECT date_trunc('day', created_at) AS day, count(*) FROM documents "
        "WHERE created_at > now() - interval '7 days' GROUP BY 1",
        "WITH per_kb AS (SELECT knowledge_base_id, count(*) AS n FROM chunks GROUP BY 1) "
        "SELECT kb.name, coalesce(p.n, 0) FROM knowledge_bases kb "
        "LEFT JOIN per_kb p ON p.knowledge_base_id = kb.id",
        "SELECT lower(title), upper(status), length(content) FROM documents d "
        "JOIN chunks c ON c.document_id = d.id WHERE c.content ILIKE '%refund%' OR title ~* 'x'",
        "SELECT title FROM documents WHERE id IN (SELECT document_id FROM chunks) "
        "AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = documents.id)",
        "SELECT status, count(*) FILTER (WHERE error IS NULL), "
        "row_number() OVER (ORDER BY status) FROM documents GROUP BY status",
        "SELECT extract(year FROM created_at)::int, round(avg(size_bytes)::numeric, 2) "
        "FROM documents GROUP BY 1",
        "SELECT CASE WHEN chunk_count > 10 THEN 'big' ELSE 'small' END, count(*) "
        "FROM documents GROUP BY 1",
        "SELECT title FROM documents UNION SELECT name FROM knowledge_bases",
        "SELECT string_agg(title, ', '), to_char(max(created_at), 'YYYY-MM') FROM documents",
    ],
)
def test_analytics_queries_pass(sql: str) -> None:  # SPEC T-11
    scoped_sql(sql, reserved=RESERVED)


def test_tables_are_read_from_the_reader_views() -> None:  # SPEC T-11
    sql = scoped_sql(
        "WITH n AS (SELECT document_id FROM chunks) "
        "SELECT documents.title FROM documents JOIN n ON n.document_id = documents.id"
    )
    assert "FROM weft_sql.chunks AS chunks" in sql
    assert "FROM weft_sql.documents AS documents" in sql
    assert "JOIN n AS n" in sql or "JOIN n ON" in sql


@pytest.mark.parametrize(
    ("turn", "key", "scope"),
    [
        ([], None, "*"),
        (["kb1", "kb2"], None, "kb1,kb2"),
        (["kb1"], ["kb1", "kb2"], "kb1"),
        ([], ["kb2"], "kb2"),
        ([], [], ""),
        (["*", "a,b", "kb3"], None, "kb3"),
    ],
)
def test_the_knowledge_scope_setting(
    turn: list[str], key: list[str] | None, scope: str
) -> None:  # SPEC T-11, A-09
    context = ToolContext(
        user_id="u", agent_id="a", knowledge_base_ids=turn, key_knowledge_base_ids=key
    )
    assert knowledge_scope(context) == scope


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT title FROM documents -- a */ UNION SELECT key_hash FROM api_keys",
        "SELECT title /* a /* b */ FROM documents -- c */",
        "SELECT title FROM documents /* x */ -- /*",
    ],
)
def test_no_comment_reaches_postgresql(sql: str) -> None:  # SPEC T-11
    """PostgreSQL nests block comments and sqlglot may not agree on where one ends: the
    SQL that runs is regenerated from the tree without any."""
    out = scoped_sql(sql)
    assert "/*" not in out and "*/" not in out and "--" not in out
    assert "api_keys" not in out

"""Parse SQL and accept a single read-only SELECT (SPEC T-11, T-12).

The statement is parsed with sqlglot, never matched with regular expressions: comments,
stacked statements, data-modifying CTEs and dangerous functions are found in the tree.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError


class UnsafeQuery(ValueError):
    """The SQL is not a single read-only SELECT; the message says why, for the model."""


_WRITES: tuple[type[exp.Expression], ...] = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.Into,
    exp.Copy,
    exp.Set,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
)
_FORBIDDEN_FUNCTIONS = frozenset(
    {
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "lo_import",
        "lo_export",
        "dblink",
        "set_config",
        "read_csv",
        "read_csv_auto",
        "read_parquet",
        "read_json",
        "read_json_auto",
        "read_text",
        "read_blob",
        "glob",
        "sleep",
    }
)


def parse_select(sql: str, dialect: str) -> exp.Query:
    """The parsed statement; raise :class:`UnsafeQuery` unless it is one SELECT."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except ParseError as exc:
        raise UnsafeQuery(f"SQL could not be parsed: {str(exc).splitlines()[0]}") from exc
    if len(statements) != 1:
        raise UnsafeQuery("exactly one statement is allowed")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        raise UnsafeQuery("only SELECT statements are allowed")
    for node in statement.walk():
        if isinstance(node, _WRITES):
            raise UnsafeQuery(f"{node.key.upper()} is not allowed; only SELECT")
        if isinstance(node, exp.Func) and _function_name(node) in _FORBIDDEN_FUNCTIONS:
            raise UnsafeQuery(f"function {_function_name(node)} is not allowed")
        if isinstance(node, exp.Lock):
            raise UnsafeQuery("locking clauses are not allowed")
    return statement


def _function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def table_names(statement: exp.Expr) -> set[str]:
    """Tables the statement reads (CTE names excluded); a table function by its name
    (``range(10)`` -> ``generate_series``) so a whitelist can allow or refuse it."""
    ctes = {c.alias_or_name.lower() for c in statement.find_all(exp.CTE)}
    names = {_table_name(t) for t in statement.find_all(exp.Table)}
    return names - ctes


def _table_name(table: exp.Table) -> str:
    if isinstance(table.this, exp.Func):
        return _function_name(table.this)
    return str(table.name).lower()

"""Parse the model's SQL and accept only a read-only SELECT (SPEC T-11, T-12).

The statement is parsed with sqlglot, never matched with regular expressions: comments,
stacked statements, data-modifying CTEs, functions and table names are found in the tree.
Functions are checked against an allowlist, not a denylist: a function nobody thought of
(``query_to_xml`` runs a query given as a string) is refused because nobody allowed it.
These checks are the first layer; the database role and its views are the second.
"""

from __future__ import annotations

from collections.abc import Iterable

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

ANALYTICS_FUNCTIONS = frozenset(
    {
        # aggregates
        "count", "sum", "avg", "min", "max", "array_agg", "string_agg", "group_concat",
        "logical_and", "logical_or", "bool_and", "bool_or", "stddev", "stddev_pop",
        "stddev_samp", "variance", "variance_pop", "var_samp", "var_pop", "corr",
        "percentile_cont", "percentile_disc", "mode", "any_value",
        # window functions
        "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag",
        "lead", "first_value", "last_value", "nth_value",
        # conditionals and casts
        "coalesce", "nullif", "greatest", "least", "case", "if", "cast", "try_cast",
        "exists", "collate",
        # text
        "lower", "upper", "length", "char_length", "character_length", "octet_length",
        "substring", "substr", "trim", "ltrim", "rtrim", "btrim", "concat", "concat_ws",
        "replace", "split_part", "left", "right", "str_position", "strpos", "position",
        "initcap", "lpad", "rpad", "reverse", "repeat", "starts_with", "regexp_like",
        "regexp_i_like", "regexp_ilike",
        "regexp_replace", "md5",
        # numbers
        "round", "abs", "ceil", "floor", "sign", "power", "sqrt", "ln", "log", "exp", "mod",
        "trunc", "width_bucket",
        # dates and times
        "now", "current_date", "current_timestamp", "current_time", "date_trunc",
        "timestamp_trunc", "extract", "date_part", "time_to_str", "to_char", "str_to_date",
        "to_date", "to_timestamp", "date", "age", "make_date", "make_interval",
    }
)  # fmt: skip
"""Functions ``database_query`` may call (names as sqlglot or PostgreSQL spell them)."""


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
        if isinstance(node, exp.Lock):
            raise UnsafeQuery("locking clauses are not allowed")
    return statement


def check_functions(statement: exp.Expr, allowed: frozenset[str]) -> None:
    """Raise :class:`UnsafeQuery` at the first function call not in ``allowed``."""
    for node in statement.walk():
        if isinstance(node, exp.Connector):  # AND / OR are Func nodes in sqlglot's tree
            continue
        if isinstance(node, exp.Func) and function_name(node) not in allowed:
            raise UnsafeQuery(f"function {function_name(node)} is not allowed")


def check_cte_names(statement: exp.Expr, reserved: Iterable[str]) -> None:
    """Refuse a CTE named like a table or view: inside its own body, or in an earlier CTE,
    that name still means the real table, so a shadowing CTE hides a real read."""
    taken = {name.lower() for name in reserved}
    for cte in statement.find_all(exp.CTE):
        name = cte.alias_or_name.lower()
        if name in taken or name.startswith("pg_"):
            raise UnsafeQuery(f"a CTE may not be named {name!r}: that is a table's name")


def function_name(node: exp.Func) -> str:
    """The function's name, lower case (sqlglot's canonical name for the ones it knows)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def cte_names(statement: exp.Expr) -> set[str]:
    """Names the statement's CTEs define."""
    return {c.alias_or_name.lower() for c in statement.find_all(exp.CTE)}


def table_names(statement: exp.Expr) -> set[str]:
    """Tables the statement reads (CTE names excluded); a table function by its name
    (``range(10)`` -> ``generate_series``) so a whitelist can allow or refuse it."""
    names = {_table_name(t) for t in statement.find_all(exp.Table)}
    return names - cte_names(statement)


def _table_name(table: exp.Table) -> str:
    if isinstance(table.this, exp.Func):
        return function_name(table.this)
    return str(table.name).lower()

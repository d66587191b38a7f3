"""SQL with its literals masked, for wherever a ``database_query`` call is shown (SPEC E-23).

Importing this module is cheap: sqlglot (about 0.7 s and 30 MB) is loaded by the first
:func:`mask_sql` call, so an engine pays for it when it shows its first ``database_query``
call, and never if its agents do not use that tool.
"""

from __future__ import annotations


def mask_sql(sql: str) -> str:
    """``sql`` with every literal replaced by ``%s`` (what traces and UI hints show)."""
    from sqlglot import exp

    from weft_tools.sql_guard import UnsafeQuery, parse_select

    try:
        tree = parse_select(sql, "postgres")
    except UnsafeQuery:
        return "<unparsable SQL masked>"
    masked = tree.transform(
        lambda node: exp.Placeholder() if isinstance(node, exp.Literal) else node
    )
    return masked.sql(dialect="postgres")

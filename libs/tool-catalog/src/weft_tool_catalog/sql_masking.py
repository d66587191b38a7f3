"""SQL with its literals masked, for wherever a ``database_query`` call is shown (SPEC E-23).

Importing this module is cheap: sqlglot (about 0.7 s and 30 MB) is loaded by the first
:func:`mask_sql` call, or before it by :func:`load` (the engine runs that in a worker
thread, so the import does not stall its event loop), and never if no ``database_query``
call is shown.
"""

from __future__ import annotations

_loaded = False


def loaded() -> bool:
    """Whether :func:`load` has completed: :func:`mask_sql` no longer imports anything."""
    return _loaded


def load() -> None:
    """Import what :func:`mask_sql` needs (safe in a worker thread: imports are locked)."""
    global _loaded
    from weft_tool_catalog import sql_guard  # noqa: F401  (imports sqlglot)

    _loaded = True


def mask_sql(sql: str) -> str:
    """``sql`` with every literal replaced by ``%s`` (what traces and UI hints show)."""
    from sqlglot import exp

    from weft_tool_catalog.sql_guard import UnsafeQuery, parse_select

    try:
        tree = parse_select(sql, "postgres")
    except UnsafeQuery:
        return "<unparsable SQL masked>"
    masked = tree.transform(
        lambda node: exp.Placeholder() if isinstance(node, exp.Literal) else node
    )
    return masked.sql(dialect="postgres")

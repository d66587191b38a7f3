"""Sensitive tool arguments, masked wherever the engine shows a call (SPEC E-23).

A tool declares the arguments that must not leave the call itself in
``ToolSpec.sensitive_arguments`` (``database_query`` declares ``sql``). The ``tool_call``
events, the engine's logs and the trace spans carry the masked copy; the tool worker
receives the real values in ``ToolCallRequested``. SQL keeps its shape with every literal
replaced by a placeholder (``%s``), so a reader still sees which tables and columns were
queried; any other sensitive value is replaced as a whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from weft_tool_catalog import sql_masking
from weft_tool_catalog.specs import spec_by_name
from weft_tool_catalog.sql_masking import mask_sql

MASKED = "***"

_MASKERS: dict[tuple[str, str], Callable[[str], str]] = {("database_query", "sql"): mask_sql}
"""Maskers that keep what is safe to show of a value; others hide it whole."""


async def prepare_masking(tool_names: Iterable[str]) -> None:
    """Load what masking these tools' calls needs, the first time, in a worker thread:
    sqlglot takes about 0.7 s to import, which on the event loop would stall every turn
    this replica runs (invariant 4). Until then the engine does not load it at all."""
    if "database_query" in tool_names and not sql_masking.loaded():
        await asyncio.to_thread(sql_masking.load)


def masked_arguments(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``arguments`` with the tool's sensitive values masked (the input is kept)."""
    spec = spec_by_name(tool_name)
    sensitive = spec.sensitive_arguments if spec is not None else frozenset()
    if not sensitive or not sensitive & arguments.keys():
        return arguments
    return {
        name: _mask(tool_name, name, value) if name in sensitive else value
        for name, value in arguments.items()
    }


def _mask(tool_name: str, name: str, value: Any) -> Any:
    masker = _MASKERS.get((tool_name, name))
    if masker is not None and isinstance(value, str):
        return masker(value)
    return MASKED

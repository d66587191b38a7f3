"""Sensitive tool arguments are masked where calls are shown (SPEC E-23, T-11)."""

from __future__ import annotations

import pytest
from weft_engine import masking
from weft_engine.masking import MASKED, masked_arguments
from weft_tool_catalog.registry import ToolSpec

SQL = "SELECT title FROM documents WHERE title = 'Q3 salaries' AND id > 42"


def test_database_query_sql_keeps_its_shape_without_literals() -> None:  # SPEC E-23
    arguments = {"sql": SQL}
    shown = masked_arguments("database_query", arguments)
    assert "Q3 salaries" not in shown["sql"] and "42" not in shown["sql"]
    assert shown["sql"].startswith("SELECT title FROM documents WHERE title = ")
    assert arguments == {"sql": SQL}  # the tool still gets the real values


def test_unparsable_sql_is_masked_whole() -> None:  # SPEC E-23
    shown = masked_arguments("database_query", {"sql": "DROP TABLE 'x'"})
    assert "'x'" not in shown["sql"]


def test_tools_without_sensitive_arguments_are_shown_as_is() -> None:
    arguments = {"query": "refund policy"}
    assert masked_arguments("search_knowledge", arguments) is arguments
    assert masked_arguments("some_mcp_tool", arguments) is arguments


def test_any_declared_argument_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:  # E-23
    vault = ToolSpec(
        name="vault_read", description="d", parameters={"type": "object"},
        sensitive_arguments=frozenset({"token"}),
    )  # fmt: skip
    monkeypatch.setattr(masking, "spec_by_name", lambda name: vault)
    shown = masked_arguments("vault_read", {"token": "s3cr3t", "path": "/a"})
    assert shown == {"token": MASKED, "path": "/a"}

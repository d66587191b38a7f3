"""Which server tool definitions Weft refuses, and the risk of the ones it keeps (T-19)."""

from __future__ import annotations

from typing import Any

import pytest
from weft_contracts.mcp import McpToolHints
from weft_mcp_client.schema import name_problem, schema_problem
from weft_mcp_client.session import ListedTool, tool_def


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ([], "not a JSON object"),
        ({"type": "string"}, "must describe an object"),
        ({"type": "object", "properties": 5}, "not valid JSON Schema"),
        ({"type": "object", "properties": {"a": {"$ref": "https://x.test/s"}}}, "outside"),
        ({"type": "object", "properties": {"a": {"$ref": "#"}}}, "recursive"),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/x"}},
                "$defs": {"x": {"items": {"$ref": "#/$defs/y"}}, "y": {"$ref": "#/$defs/x"}},
            },
            "recursive",
        ),
        ({"type": "object", "description": "d" * 20_000}, "bytes"),
    ],
)
def test_refused_schemas_name_their_problem(schema: Any, reason: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and reason in problem


def test_deep_nesting_is_refused_without_recursion() -> None:
    schema: dict[str, Any] = {"type": "object"}
    node = schema
    for _ in range(200):
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    problem = schema_problem(schema)
    assert problem is not None and "nested deeper" in problem


def test_shared_non_recursive_refs_are_fine() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"$ref": "#/$defs/x"}},
        "$defs": {"x": {"type": "string"}},
    }
    assert schema_problem(schema) is None


@pytest.mark.parametrize("name", ["", "a b", "x" * 129, "tool\n", "ünï"])
def test_bad_names_are_refused(name: str) -> None:
    assert name_problem(name) is not None


def test_the_servers_read_only_hint_never_lowers_the_risk() -> None:
    tool = ListedTool(
        name="get",
        description="reads",
        input_schema={"type": "object"},
        hints=McpToolHints(read_only_hint=True, destructive_hint=False),
        problem=None,
    )
    hinted = tool_def("s1", "srv", tool, read_only=False, always_ask=True)
    assert hinted.risk == "write" and hinted.always_ask
    assert hinted.hints.read_only_hint is True
    marked = tool_def("s1", "srv", tool, read_only=True, always_ask=False)
    assert marked.risk == "read" and not marked.always_ask
    assert marked.name.startswith("mcp_srv_get_")

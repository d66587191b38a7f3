"""Tool arguments as pydantic models: the one source of a built-in tool's schema, casting
and validation (SPEC T-01, T-02)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field
from weft_contracts import ToolContext
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_catalog.arguments import ToolArguments, arguments_schema
from weft_tool_catalog.specs import (
    BUILTIN_SPECS,
    MCP_SPECS,
    QUERY_KNOWLEDGE_GRAPH,
    definitions_for,
)
from weft_tool_catalog.wiki_specs import WIKI_SPECS

HANDWRITTEN = Path(__file__).parent / "data" / "tool_parameters_handwritten.json"
"""The built-in tools' parameters as they were written by hand before the argument models."""


def _plain(schema: Any) -> Any:
    """``schema`` with an all-string ``enum``'s redundant ``"type": "string"`` left out."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _plain(v) for k, v in schema.items()}
    enum = out.get("enum")
    strings = isinstance(enum, list) and all(isinstance(v, str) for v in enum)
    if strings and out.get("type") == "string":
        del out["type"]
    return out


def test_every_builtin_schema_says_what_the_handwritten_one_said() -> None:
    # SPEC T-01: required fields, types, enums, bounds, defaults, descriptions and
    # additionalProperties all survive the move to argument models
    old = json.loads(HANDWRITTEN.read_text())
    # the MCP, wiki and query_knowledge_graph tools were born as argument models: they had
    # no handwritten schema
    moved = [s for s in BUILTIN_SPECS if s not in (*MCP_SPECS, *WIKI_SPECS, QUERY_KNOWLEDGE_GRAPH)]
    assert sorted(old) == sorted(s.name for s in moved)
    for spec in moved:
        assert spec.arguments is not None, spec.name
        assert _plain(spec.parameters) == old[spec.name], spec.name


_DEFINITIONS_PROBE = """
import json
from weft_tool_catalog.specs import BUILTIN_SPECS, definitions_for
print(json.dumps(definitions_for([s.name for s in BUILTIN_SPECS])))
"""


def test_definitions_are_byte_identical_across_calls_and_processes() -> None:
    # SPEC T-01: every engine replica sends the same bytes (the provider's prompt cache)
    names = [s.name for s in reversed(BUILTIN_SPECS)]
    here = json.dumps(definitions_for(names))
    assert here == json.dumps(definitions_for(sorted(names)))
    done = subprocess.run(
        [sys.executable, "-c", _DEFINITIONS_PROBE],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == here


class _Item(ToolArguments):
    """A nested argument."""

    n: Annotated[int, Field(ge=1)]
    tag: str | None = None


class _Args(ToolArguments):
    """Arguments of the test tool."""

    count: Annotated[int, Field(ge=1, le=5)] = 2
    flag: bool = False
    note: str | None = None
    items: list[_Item] = []


def test_the_schema_is_the_models_without_titles_refs_or_null() -> None:
    schema = arguments_schema(_Args)
    assert schema == {
        "additionalProperties": False,
        "properties": {
            "count": {"default": 2, "maximum": 5, "minimum": 1, "type": "integer"},
            "flag": {"default": False, "type": "boolean"},
            "note": {"type": "string"},
            "items": {
                "default": [],
                "items": {
                    "additionalProperties": False,
                    "properties": {
                        "n": {"minimum": 1, "type": "integer"},
                        "tag": {"type": "string"},
                    },
                    "required": ["n"],
                    "type": "object",
                },
                "type": "array",
            },
        },
        "type": "object",
    }


class _Recorder:
    spec = ToolSpec(name="rec", description="d", arguments=_Args)

    def __init__(self) -> None:
        self.seen: list[_Args] = []

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        self.seen.append(call.args(_Args))
        return ToolOutcome(success=True, output="ok")


def _call(arguments: dict[str, Any]) -> ToolInvocation:
    ctx = ToolContext(user_id="u", agent_id="a", max_output_chars=1000)
    return ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments=arguments, context=ctx
    )


async def test_the_tool_reads_typed_arguments_cast_from_the_models_schema() -> None:
    # SPEC T-02: casting follows the schema derived from the model, nested items included
    registry, tool = ToolRegistry(), _Recorder()
    registry.register(tool)
    outcome = await registry.execute(
        "rec", _call({"count": "3", "flag": "yes", "items": '[{"n": "4"}]'})
    )
    assert outcome.success, outcome.error
    assert tool.seen == [_Args(count=3, flag=True, items=[_Item(n=4)])]
    defaults = await registry.execute("rec", _call({}))
    assert defaults.success and tool.seen[-1] == _Args()


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"count": 9}, "invalid arguments for rec: count: 9 is greater than the maximum of 5"),
        ({"note": None}, "invalid arguments for rec: note: None is not of type 'string'"),
        (
            {"items": [{"n": 1, "x": 1}]},
            "invalid arguments for rec: items/0: Additional properties are not allowed "
            "('x' was unexpected)",
        ),
    ],
)
async def test_invalid_arguments_get_the_validators_message_and_never_run(
    arguments: dict[str, Any], error: str
) -> None:
    # SPEC T-02: the model reads which argument is wrong; the tool does not run
    registry, tool = ToolRegistry(), _Recorder()
    registry.register(tool)
    outcome = await registry.execute("rec", _call(arguments))
    assert (outcome.success, outcome.error) == (False, error)
    assert tool.seen == []


def test_a_spec_takes_its_parameters_from_the_model_or_by_hand_never_both() -> None:
    with pytest.raises(ValueError, match="parameters come from its arguments model"):
        ToolSpec(name="x", description="d", arguments=_Args, parameters={"type": "object"})
    assert ToolSpec(name="x", description="d", parameters={"type": "object"}).arguments is None

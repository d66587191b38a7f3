"""ToolRegistry rules: SPEC T-01, T-02, T-03."""

from __future__ import annotations

import json

import pytest
from weft_contracts import ToolContext
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec, truncate_output
from weft_tool_catalog.registry import TRUNCATION_MARKER


class EchoTool:
    def __init__(self, name: str, output: str = "ok"):
        self.spec = ToolSpec(
            name=name,
            description=f"echo {name}",
            parameters={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        )
        self.output = output
        self.calls = 0

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        self.calls += 1
        return ToolOutcome(success=True, output=self.output or call.arguments["text"])


def _call(args: dict[str, object], limit: int = 24000) -> ToolInvocation:
    ctx = ToolContext(user_id="u", agent_id="a", max_output_chars=limit)
    return ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments=args, context=ctx
    )


def test_first_registration_wins() -> None:  # SPEC T-01
    registry = ToolRegistry()
    registry.register(EchoTool("search"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(EchoTool("search"))


def test_definitions_are_sorted_and_byte_identical() -> None:  # SPEC T-01
    a, b = ToolRegistry(), ToolRegistry()
    for name in ("zeta", "alpha", "mid"):
        a.register(EchoTool(name))
    for name in ("mid", "zeta", "alpha"):
        b.register(EchoTool(name))
    assert [d["function"]["name"] for d in a.definitions()] == ["alpha", "mid", "zeta"]
    assert json.dumps(a.definitions()) == json.dumps(b.definitions())


async def test_invalid_arguments_are_a_readable_error_and_the_tool_does_not_run() -> None:  # T-02
    registry = ToolRegistry()
    tool = EchoTool("echo")
    registry.register(tool)
    outcome = await registry.execute("echo", _call({"text": 3}))
    assert not outcome.success
    assert "text" in (outcome.error or "") and "string" in (outcome.error or "")
    assert tool.calls == 0


async def test_unknown_tool_does_not_name_the_registry() -> None:  # SPEC A-08
    """Listing the registry would show a hijacked model every tool it may not use."""
    registry = ToolRegistry()
    registry.register(EchoTool("echo"))
    outcome = await registry.execute("nope", _call({"text": "x"}))
    assert not outcome.success and outcome.error == "unknown tool 'nope'"


def test_truncation_keeps_70_percent_head_and_30_percent_tail() -> None:  # SPEC T-03
    text = "H" * 700 + "M" * 5000 + "T" * 300
    out = truncate_output(text, 1000)
    head, _, tail = out.partition("[...")
    assert head.strip() == "H" * 700
    assert tail.endswith("T" * 300)
    assert "5000 characters omitted" in out


def test_truncation_shares_are_exact_and_counted_in_characters() -> None:  # SPEC T-03
    """70 % head, 30 % tail, the rest named by the marker; a text at the limit is kept."""
    text = "".join(chr(0x4E00 + i) for i in range(100))  # CJK: one rune, three UTF-8 bytes
    assert truncate_output(text, 100) == text
    out = truncate_output(text, 10)
    assert out == text[:7] + TRUNCATION_MARKER.format(omitted=90) + text[-3:]
    assert truncate_output(text, 99) == (
        text[:69] + TRUNCATION_MARKER.format(omitted=1) + text[-30:]
    )


async def test_registry_truncates_to_the_per_call_limit() -> None:  # SPEC T-03 override
    registry = ToolRegistry()
    registry.register(EchoTool("big", output="x" * 5000))
    outcome = await registry.execute("big", _call({"text": "-"}, limit=1000))
    assert len(outcome.output) < 1100 and "omitted" in outcome.output

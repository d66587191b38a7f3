"""ToolRegistry: first registration wins, sorted definitions, validate -> run -> truncate.

SPEC T-01 (first wins, sorted), T-02 (schema validation before execution), T-03 (output
truncation 70 % head + 30 % tail with a marker). Casting of string parameters and the
rest of T-02 come with the tools issue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from weft_contracts import ToolContext


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = True
    """Read-only tools may run concurrently and be retried on another worker (invariant 3)."""

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True, kw_only=True)
class ToolInvocation:
    """One call as a tool sees it."""

    tenant_id: str
    session_id: str
    request_id: str
    arguments: dict[str, Any]
    context: ToolContext


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """A tool's answer; ``success=False`` carries an error the model can read."""

    success: bool
    output: str = ""
    error: str | None = None
    display_type: str = "text"
    data: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    """A runnable tool."""

    spec: ToolSpec

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Execute; raise only for infrastructure failures."""
        ...


TRUNCATION_MARKER = "\n\n[... {omitted} characters omitted ...]\n\n"


def truncate_output(text: str, limit: int) -> str:
    """Keep 70 % of ``limit`` from the head and 30 % from the tail (SPEC T-03)."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.7)
    tail = limit - head
    omitted = len(text) - head - tail
    return text[:head] + TRUNCATION_MARKER.format(omitted=omitted) + text[-tail:]


class ToolRegistry:
    """Tools by name; a second tool with a taken name is refused (SPEC T-01)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raise ValueError when the name is taken."""
        name = tool.spec.name
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        Draft202012Validator.check_schema(tool.spec.parameters)
        self._tools[name] = tool
        self._validators[name] = Draft202012Validator(tool.spec.parameters)

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def spec(self, name: str) -> ToolSpec | None:
        """The spec of ``name``, if registered."""
        tool = self._tools.get(name)
        return tool.spec if tool else None

    def definitions(self, allowed: list[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI tool definitions sorted by name: byte-identical across requests."""
        names = self.names() if allowed is None else sorted(set(allowed) & set(self._tools))
        return [self._tools[n].spec.definition() for n in names]

    async def execute(self, name: str, call: ToolInvocation) -> ToolOutcome:
        """Validate the arguments, run the tool, truncate its output."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self.names())
            return ToolOutcome(success=False, error=f"unknown tool {name!r}; known: {known}")
        errors = sorted(self._validators[name].iter_errors(call.arguments), key=str)
        if errors:
            detail = "; ".join(
                f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors
            )
            return ToolOutcome(success=False, error=f"invalid arguments for {name}: {detail}")
        outcome = await tool.run(call)
        limit = call.context.max_output_chars
        return ToolOutcome(
            success=outcome.success,
            output=truncate_output(outcome.output, limit),
            error=outcome.error,
            display_type=outcome.display_type,
            data=outcome.data,
        )


def dumps(value: Any) -> str:
    """Compact, stable JSON for tool outputs."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

"""The tools a turn offers (SPEC A-08, T-01, T-19): the agent's built-ins, the MCP tools
when the agent has MCP servers, and the MCP tools published during the turn.

A ``discover_mcp_tools`` call that describes a tool returns its definition (``data``
under ``PUBLISHED_KEY``); when the round closes (``observe``) the definition joins the
turn's tool set (``publish``), so the model can call it by its dynamic name from the next
round on. Publishing goes through a ``ToolRegistry`` holding every built-in first: T-01's
first-registration-wins refuses a name that is taken, and the registry refuses a schema
that is not a valid JSON Schema. Only tools of the agent's own servers are accepted, at
most ``MAX_PUBLISHED`` per turn.

The risk of an MCP call (SPEC H-01) is the registered tool's: ``write`` unless the tenant
marked it read-only, asked about every time unless the tenant turned that off. A
``call_mcp_tool`` naming a tool the turn has not seen described is treated as the worst
case (``destructive``, always asked): the engine cannot know what it will run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from weft_contracts import PUBLISHED_KEY, AgentConfig, McpToolDef, RiskClass
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_catalog.specs import (
    OFFERABLE_SPECS,
    always_asks,
    definitions_for,
    offered_tools,
    risk_of,
)

log = structlog.get_logger(__name__)

DISCOVER = "discover_mcp_tools"
CALL = "call_mcp_tool"
MCP_TOOLS: frozenset[str] = frozenset({DISCOVER, CALL})
"""Offered exactly when the agent has MCP servers (its selection mode, not its allow-list,
decides: the reference's registration step 5)."""

MAX_PUBLISHED = 64
"""Most MCP tools one turn offers by name; past it the model uses ``call_mcp_tool``."""


def _allowed(agent: AgentConfig) -> list[str]:
    names = [n for n in agent.allowed_tools if n not in MCP_TOOLS]
    return [*names, *MCP_TOOLS] if agent.mcp_servers else names


def offered_names(agent: AgentConfig, published: Iterable[McpToolDef] = ()) -> list[str]:
    """The turn's effective tool set, sorted: what the model is offered and the only tools
    the engine and the workers run (A-08)."""
    return sorted({*offered_tools(_allowed(agent)), *(d.name for d in published)})


def definitions(agent: AgentConfig, published: Iterable[McpToolDef] = ()) -> list[dict[str, Any]]:
    """OpenAI tool definitions of the turn's tools, sorted by name (T-01: byte-identical
    across requests with the same tools)."""
    found: list[dict[str, Any]] = [*definitions_for(_allowed(agent))]
    found += [d.definition() for d in published]
    return sorted(found, key=lambda d: str(d["function"]["name"]))


class _Offered:
    """A spec in the publishing registry; never run."""

    def __init__(self, spec: ToolSpec):
        self.spec = spec

    async def run(self, call: ToolInvocation) -> ToolOutcome:  # pragma: no cover - never run
        raise RuntimeError("the engine does not run tools")


def publish(
    agent: AgentConfig, published: list[McpToolDef], results: Iterable[Any]
) -> list[McpToolDef]:
    """``published`` with the MCP tools that ``results`` (a round's ``ToolCallCompletedData``)
    describe added, each vetted (see the module docstring)."""
    offered = [d for r in results if r.success and r.tool_name == DISCOVER
               for d in _defs(r.data.get(PUBLISHED_KEY))]  # fmt: skip
    if not offered:
        return published
    servers = {s.id for s in agent.mcp_servers}
    registry = ToolRegistry()
    for spec in OFFERABLE_SPECS:
        registry.register(_Offered(spec))
    for known in published:
        registry.register(_Offered(_spec(known)))
    kept = list(published)
    for tool in offered:
        if tool.name in {k.name for k in kept}:
            continue  # described again: the first definition stays for the turn
        if len(kept) >= MAX_PUBLISHED or tool.server_id not in servers or tool.problem:
            log.warning("mcp_tool_not_published", tool=tool.name, server_id=tool.server_id)
            continue
        try:
            registry.register(_Offered(_spec(tool)))  # T-01, and a valid JSON Schema
        except Exception as exc:  # a taken name or a bad schema: never offered
            log.warning("mcp_tool_refused", tool=tool.name, reason=str(exc)[:200])
            continue
        kept.append(tool)
    return kept


def _defs(raw: Any) -> list[McpToolDef]:
    if not isinstance(raw, list):
        return []
    defs = []
    for item in raw[:MAX_PUBLISHED]:
        try:
            defs.append(McpToolDef.model_validate(item))
        except ValidationError:
            log.warning("mcp_tool_definition_invalid")
    return defs


def _spec(tool: McpToolDef) -> ToolSpec:
    return ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        read_only=False,
        risk=tool.risk,
        always_ask=tool.always_ask,
    )


@dataclass(frozen=True)
class Marks:
    """SPEC H-01: what the policy needs to know about one call."""

    risk: RiskClass
    always_ask: bool


def marks(
    name: str, arguments: dict[str, Any], published: list[McpToolDef], always: Iterable[str]
) -> Marks:
    """The risk class and "always ask" of a call: a built-in's spec, a published MCP
    tool's registration flags, or for ``call_mcp_tool`` the flags of the tool it names.
    ``always``: the agent's own always-ask list."""
    listed = name in set(always)
    target = _target(name, arguments, published)
    if target is not None:
        return Marks(target.risk, target.always_ask or listed)
    if name == CALL:  # a tool the turn never saw described: assume the worst
        return Marks("destructive", True)
    return Marks(risk_of(name), listed or always_asks(name))


def _target(name: str, arguments: dict[str, Any], published: list[McpToolDef]) -> McpToolDef | None:
    wanted = name
    if name == CALL:
        ref = arguments.get("tool_ref")
        if not isinstance(ref, str):
            return None
        wanted = ref
    for tool in published:
        if wanted in (tool.name, f"{tool.server_id}/{tool.tool_name}"):
            return tool
    return None

"""ToolRegistry: first registration wins, sorted definitions, validate -> run -> truncate.

SPEC T-01 (first wins, sorted), T-02 (cast string parameters, then JSON Schema
validation, then execution), T-03 (output truncation 70 % head + 30 % tail with a marker,
per-agent limit, per-tool cap), T-04 (cleanup hook of cleanable tools at turn end).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

import structlog
from jsonschema import Draft202012Validator
from pydantic import ValidationError
from weft_contracts import (
    RiskClass,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallRequested,
    ToolContext,
)
from weft_contracts.tools import SHOWN_NAME_CHARS

from weft_tool_catalog.arguments import ToolArguments, arguments_schema
from weft_tool_catalog.capabilities import NO_REQUIREMENT, ToolRequirement
from weft_tool_catalog.casting import cast_arguments

log = structlog.get_logger(__name__)

A = TypeVar("A", bound=ToolArguments)


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the model is told about a tool.

    A built-in tool gives ``arguments``, its argument model, and ``parameters`` is derived
    from it; a tool without one (a test double, a plugin) gives ``parameters`` itself."""

    name: str
    description: str
    arguments: type[ToolArguments] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    read_only: bool = True
    """Read-only tools may run concurrently and be retried on another worker (invariant 3)."""
    requirement: ToolRequirement = NO_REQUIREMENT
    """Knowledge-base capabilities the tool needs (SPEC A-07)."""
    max_output_chars: int | None = None
    """The tool's own output cap, applied when tighter than the agent's (SPEC T-03)."""
    sensitive_arguments: frozenset[str] = frozenset()
    """Arguments masked in events, traces and logs (E-23: database_query's SQL)."""
    risk: RiskClass | None = None
    """SPEC H-01: read, probe, write or destructive; None: ``read`` for a read-only tool,
    else ``write`` (``risk_class``)."""
    always_ask: bool = False
    """Asked about at every access level; no grant skips it (SPEC H-01)."""

    def risk_class(self) -> RiskClass:
        """The tool's risk class (``risk``, or what ``read_only`` implies)."""
        if self.risk is not None:
            return self.risk
        return "read" if self.read_only else "write"

    def __post_init__(self) -> None:
        if self.arguments is not None:
            if self.parameters:
                raise ValueError(f"tool {self.name!r}: parameters come from its arguments model")
            object.__setattr__(self, "parameters", arguments_schema(self.arguments))

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
    parsed: ToolArguments | None = None
    """The arguments as the tool's model, once the registry validated them (SPEC T-02)."""
    credential: str | None = None
    """The turn's request credential: a tool that calls a Weft service presents it."""
    call_id: str | None = None
    """The model's id of this call (an MCP authorisation resumes it, SPEC H-06)."""

    def args(self, model: type[A]) -> A:
        """The arguments as ``model``: the registry's validated instance, or (a tool run
        directly, outside a registry) ``arguments`` validated now."""
        if isinstance(self.parsed, model):
            return self.parsed
        return model.model_validate(self.arguments)


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """A tool's answer; ``success=False`` carries an error the model can read."""

    success: bool
    output: str = ""
    error: str | None = None
    display_type: str = "text"
    data: dict[str, Any] = field(default_factory=dict)

    def answering(
        self, call: ToolCallRequested, *, duration_ms: int, worker: str
    ) -> ToolCallCompleted:
        """The ``tool.results`` record of this outcome for ``call``: it carries the call's
        own credential, because the result belongs to the turn like the call."""
        return ToolCallCompleted(
            tenant_id=call.tenant_id,
            session_id=call.session_id,
            request_id=call.request_id,
            traceparent=call.traceparent,
            credential=call.credential,
            data=ToolCallCompletedData(
                call_id=call.data.call_id,
                tool_name=call.data.tool_name,
                success=self.success,
                output=self.output,
                error=self.error,
                display_type=self.display_type,
                data=self.data,
                duration_ms=duration_ms,
                worker=worker,
            ),
        )


@dataclass(frozen=True, kw_only=True)
class TimedOut(ToolOutcome):
    """The failed outcome of a call that overran its deadline (a metric's ``timeout``)."""


@dataclass(frozen=True, kw_only=True)
class Refused(ToolOutcome):
    """The failed outcome of a call its turn's tool set does not permit (never run)."""


def outcome_label(outcome: ToolOutcome) -> str:
    """The ``outcome`` label of ``weft_tool_calls_total``: success, error, timeout or
    refused."""
    if isinstance(outcome, TimedOut):
        return "timeout"
    if isinstance(outcome, Refused):
        return "refused"
    return "success" if outcome.success else "error"


class Tool(Protocol):
    """A runnable tool."""

    spec: ToolSpec

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Execute; raise only for infrastructure failures."""
        ...


@runtime_checkable
class Cleanable(Protocol):
    """A tool holding per-turn resources (e.g. DuckDB tables) released at turn end (T-04)."""

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Release what the turn ``request_id`` of ``session_id`` left behind."""
        ...


@runtime_checkable
class DynamicTools(Protocol):
    """Tools whose names are not known when the registry is built (the dynamic ``mcp_*``
    tools of a tenant's MCP servers): every name starting with ``prefix`` is theirs, after
    the registered tools (a registered name always wins, SPEC T-01)."""

    prefix: str

    def spec(self, name: str) -> ToolSpec:
        """What the worker needs to know about ``name`` before running it."""
        ...

    async def run(self, name: str, call: ToolInvocation) -> ToolOutcome:
        """Validate ``call``'s arguments against the tool's own schema and run it."""
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
        self._dynamic: list[DynamicTools] = []

    def add_dynamic(self, tools: DynamicTools) -> None:
        """Route unregistered names starting with ``tools.prefix`` to ``tools``."""
        self._dynamic.append(tools)

    def _dynamic_for(self, name: str) -> DynamicTools | None:
        return next((d for d in self._dynamic if name.startswith(d.prefix)), None)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; raise ValueError when the name is taken."""
        name = tool.spec.name
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        Draft202012Validator.check_schema(tool.spec.parameters)
        self._tools[name] = tool
        self._validators[name] = Draft202012Validator(tool.spec.parameters)

    def metric_name(self, name: str) -> str:
        """``name`` as a metric label: a registered tool's own name, ``mcp`` for every
        dynamic (MCP) tool, ``unknown`` for anything else (a forged call's name must not
        become a series)."""
        if name in self._tools:
            return name
        return "mcp" if self._dynamic_for(name) is not None else "unknown"

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def spec(self, name: str) -> ToolSpec | None:
        """The spec of ``name``, if registered (or a dynamic tool's)."""
        tool = self._tools.get(name)
        if tool is not None:
            return tool.spec
        dynamic = self._dynamic_for(name)
        return dynamic.spec(name) if dynamic else None

    def definitions(self, allowed: list[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI tool definitions sorted by name: byte-identical across requests."""
        names = self.names() if allowed is None else sorted(set(allowed) & set(self._tools))
        return [self._tools[n].spec.definition() for n in names]

    async def execute(self, name: str, call: ToolInvocation) -> ToolOutcome:
        """Cast and validate the arguments, run the tool, truncate its output (T-02, T-03)."""
        tool = self._tools.get(name)
        dynamic = self._dynamic_for(name) if tool is None else None
        if dynamic is not None:  # it validates against the tool's own schema
            outcome = await dynamic.run(name, call)
            limit = call.context.max_output_chars
            return replace(outcome, output=truncate_output(outcome.output, limit))
        if tool is None:  # naming the registry's tools would show a caller what it may not use
            return ToolOutcome(success=False, error=f"unknown tool {name[:SHOWN_NAME_CHARS]!r}")
        arguments = cast_arguments(call.arguments, tool.spec.parameters)
        errors = sorted(self._validators[name].iter_errors(arguments), key=str)
        if errors:
            detail = "; ".join(
                f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors
            )
            return ToolOutcome(success=False, error=f"invalid arguments for {name}: {detail}")
        model = tool.spec.arguments
        try:
            parsed = model.model_validate(arguments) if model is not None else None
        except ValidationError as exc:  # the schema passed; the model is the stricter
            return ToolOutcome(success=False, error=f"invalid arguments for {name}: {exc}")
        outcome = await tool.run(replace(call, arguments=arguments, parsed=parsed))
        limit = call.context.max_output_chars
        if tool.spec.max_output_chars is not None:
            limit = min(limit, tool.spec.max_output_chars)
        return replace(outcome, output=truncate_output(outcome.output, limit))

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Run every cleanable tool's cleanup; one failing does not skip the others (T-04)."""
        holders: list[tuple[str, object]] = [(n, self._tools[n]) for n in self.names()]
        holders += [(d.prefix, d) for d in self._dynamic]
        for name, tool in holders:
            if isinstance(tool, Cleanable):
                try:
                    await tool.cleanup(session_id, request_id)
                except Exception:  # cleanup is best effort; the turn already ended
                    log.exception("tool_cleanup_failed", tool=name, session_id=session_id)


def dumps(value: Any) -> str:
    """Compact, stable JSON for tool outputs."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

"""The tool registry shared by tool-exec (execution), the engine (definitions) and
agent-config (catalog), and the built-in tools."""

from weft_tools.registry import (
    Refused,
    TimedOut,
    Tool,
    ToolInvocation,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
    outcome_label,
    truncate_output,
)

__all__ = [
    "Refused",
    "TimedOut",
    "Tool",
    "ToolInvocation",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "outcome_label",
    "truncate_output",
]

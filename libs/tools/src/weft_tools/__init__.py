"""The tool registry shared by tool-exec (execution), the engine (definitions) and
agent-config (catalog), and the built-in tools."""

from weft_tools.registry import (
    Tool,
    ToolInvocation,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
    truncate_output,
)

__all__ = ["Tool", "ToolInvocation", "ToolOutcome", "ToolRegistry", "ToolSpec", "truncate_output"]

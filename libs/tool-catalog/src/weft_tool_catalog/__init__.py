"""What Weft's tools are, without their implementations: specs, argument models, JSON
schemas, risk classes, knowledge-base capabilities, the agent editor's catalog and the
registry that validates and runs a tool.

The contract shared by the engine (definitions, routing, risk, masking), agent-config (the
catalog and the tool policy), the gateway (checking an edited call), the sandbox (its
tools' specs and registry) and tool-exec (which registers the implementations of
``weft_tools`` against these specs). It loads no database driver, SQLAlchemy, DuckDB, PDF,
spreadsheet or HTTP library (``tests/unit/test_tool_catalog_light.py``).
"""

from weft_tool_catalog.registry import (
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

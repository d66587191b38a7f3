"""The messages of a new turn: system prompt, history, the user's message (SPEC E-02)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from weft_contracts import AgentConfig

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Use the tools when they help, and answer in the user's language."
)
CITATION_PROTOCOL = (
    "When you use a passage returned by a tool, cite it with its id in square brackets, "
    "for example [c1]. Never invent ids."
)


def system_prompt(agent: AgentConfig) -> str:
    """Explicit body first, then the citation protocol (a subset of SPEC E-24)."""
    body = agent.system_prompt.strip() or DEFAULT_SYSTEM_PROMPT
    return f"{body}\n\n{CITATION_PROTOCOL}"


def initial_messages(
    agent: AgentConfig, history: list[dict[str, Any]], query: str
) -> list[dict[str, Any]]:
    """System, history, then the user's message with its runtime context (not persisted)."""
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    return [
        {"role": "system", "content": system_prompt(agent)},
        *history,
        {"role": "user", "content": f"{query}\n\n<runtime_context>date: {today}</runtime_context>"},
    ]

"""The messages of a new turn: system prompt, history, the user's message (SPEC E-02, E-24).

System prompt sections in the reference's order: the base (explicit body, else the pure
or the RAG template), runtime conventions, sources, tools, output, memory, citation
protocol. Skills are added by the sandbox issue. Per-turn facts (date, session) go into
the user message's ``runtime_context`` and are never persisted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from weft_contracts import AgentConfig

PURE_BASE = (
    "You are a helpful assistant. Think step by step, use tools when they help, and answer "
    "in the user's language."
)
RAG_BASE = (
    "You are a knowledge assistant. Answer from the user's knowledge bases: search before "
    "answering factual questions and do not invent facts the sources do not support."
)
RUNTIME_CONVENTIONS = (
    "Runtime conventions: the user's message may end with a <runtime_context> block (date, "
    "session facts); use it, never quote it."
)
SOURCES = "Sources: passages found by tools are named by short ids such as c1 (chunk) or d1."
OUTPUT = "Output: answer in plain Markdown; when tools cannot give what is needed, say so plainly."
MEMORY = "Memory: use search_memory for facts the user told you in earlier conversations."
CITATION_PROTOCOL = (
    "Citation protocol: when you use a passage returned by a tool, cite it with its id in "
    "square brackets, for example [c1]. Never invent ids."
)
KNOWLEDGE_TOOLS = frozenset({"search_knowledge", "read_document", "list_documents"})
DISPLAY_HINTS = {
    "search_knowledge": "Searching the knowledge base",
    "read_document": "Reading a document",
    "list_documents": "Listing documents",
    "search_conversations": "Searching earlier conversations",
    "search_memory": "Recalling memories",
    "web_search": "Searching the web",
    "web_fetch": "Reading web pages",
    "shell_exec": "Running a command",
}
"""SPEC E-18: what the client may show while a tool runs."""


def system_prompt(agent: AgentConfig) -> str:
    """The sections that apply to this agent, in order."""
    tools = set(agent.allowed_tools)
    uses_knowledge = bool(tools & KNOWLEDGE_TOOLS)
    sections: list[tuple[bool, Callable[[], str]]] = [
        (True, lambda: agent.system_prompt.strip() or (RAG_BASE if uses_knowledge else PURE_BASE)),
        (True, lambda: RUNTIME_CONVENTIONS),
        (uses_knowledge, lambda: SOURCES),
        (bool(tools), lambda: "Tools: " + ", ".join(sorted(tools)) + "."),
        (True, lambda: OUTPUT),
        ("search_memory" in tools, lambda: MEMORY),
        (uses_knowledge, lambda: CITATION_PROTOCOL),
    ]
    return "\n\n".join(render() for include, render in sections if include)


def runtime_context(session_id: str) -> str:
    """Per-turn facts appended to the user's message (not persisted)."""
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    return f"<runtime_context>date: {today}; session: {session_id}</runtime_context>"


def initial_messages(
    agent: AgentConfig, history: list[dict[str, Any]], query: str, session_id: str = ""
) -> list[dict[str, Any]]:
    """System, history, then the user's message with its runtime context."""
    return [
        {"role": "system", "content": system_prompt(agent)},
        *history,
        {"role": "user", "content": f"{query}\n\n{runtime_context(session_id)}"},
    ]


def display_hint(tool_name: str) -> str:
    """A human label of the tool call (SPEC E-18)."""
    return DISPLAY_HINTS.get(tool_name, f"Using {tool_name}")

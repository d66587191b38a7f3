"""One stored turn as OpenAI messages, as the engine will send it (SPEC M-09, T-20).

Thinking is never replayed. Past knowledge-base results are replaced by the fixed
redaction text (the knowledge base may have changed) unless the agent retains retrieval
history; then large retrieval payloads are compacted to one line.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from weft_context.images import descriptions_block, multimodal_content

KB_RESULT_REDACTION = (
    "[Previous retrieval result omitted - knowledge base may have changed. "
    "Please perform a fresh search.]"
)
KB_TOOLS = frozenset(
    {
        "search_knowledge", "read_document", "list_documents", "query_knowledge_graph",
        "wiki_search", "wiki_read_page",
        # legacy names (SPEC A-06)
        "knowledge_search", "grep_chunks", "list_knowledge_chunks", "get_document_info",
        "wiki_read_source_doc",
    }
)  # fmt: skip


class StoredMessage(Protocol):
    """What replay reads of a stored message (an ORM ``Message`` or a selected row)."""

    content: str
    agent_steps: list[dict[str, Any]]


def user_message(user: Any, *, vision: bool = False) -> dict[str, Any]:
    """The stored user message; with images (SPEC E-26) as image parts for a model with
    vision, else with the stored descriptions (the VLM is not called again)."""
    images: list[dict[str, Any]] = getattr(user, "images", None) or []
    if not images:
        return {"role": "user", "content": user.content}
    if vision:
        return {
            "role": "user",
            "content": multimodal_content(user.content, [i["url"] for i in images]),
        }
    block = descriptions_block([i.get("description") for i in images])
    return {"role": "user", "content": f"{user.content}\n\n{block}"}


_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>\s*", re.DOTALL)


def replay_turn(
    user: StoredMessage,
    assistant: StoredMessage,
    *,
    retain_retrieval: bool = False,
    vision: bool = False,
) -> list[dict[str, Any]]:
    """user -> assistant(tool_calls) + tool messages per step -> final answer (SPEC M-09)."""
    messages: list[dict[str, Any]] = [user_message(user, vision=vision)]
    for step in assistant.agent_steps:
        calls = step.get("tool_calls") or []
        if not calls:
            continue
        messages.append(
            {
                "role": "assistant",
                "content": strip_thinking(step.get("thought") or ""),
                "tool_calls": [_call(c) for c in calls],
            }
        )
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": c["call_id"],
                "content": tool_content(c, retain_retrieval=retain_retrieval),
            }
            for c in calls
        )
    messages.append({"role": "assistant", "content": strip_thinking(assistant.content)})
    return messages


def strip_thinking(text: str) -> str:
    """The answer without ``<think>`` blocks."""
    return _THINK_BLOCK.sub("", text).strip() if "<think" in text else text


def _call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call["call_id"],
        "type": "function",
        "function": {
            "name": call["tool_name"],
            "arguments": json.dumps(call.get("arguments") or {}),
        },
    }


def tool_content(call: dict[str, Any], *, retain_retrieval: bool = False) -> str:
    """A tool result as history shows it (SPEC T-20)."""
    if not call.get("success"):
        return f"Error: {call.get('error') or 'unknown error'}"
    name = str(call.get("tool_name"))
    if name in KB_TOOLS:
        return (
            compact_retrieval(name, str(call.get("output") or ""))
            if retain_retrieval
            else (KB_RESULT_REDACTION)
        )
    return str(call.get("output") or "")


def compact_retrieval(tool_name: str, output: str) -> str:
    """A retrieval payload as one line (CompactToolOutputForHistory of the reference)."""
    try:
        data = json.loads(output)
    except ValueError:
        return output
    if not isinstance(data, dict):
        return output
    results = data.get("results")
    count = data.get("count", len(results) if isinstance(results, list) else 0)
    # wiki_search stays whole: a retaining agent (the wiki-fixer) edits the slugs it found.
    if tool_name in {"search_knowledge", "knowledge_search"}:
        return f"Knowledge search returned {count} result(s) (details omitted from history)"
    if tool_name in {"read_document", "list_documents", "list_knowledge_chunks"}:
        total = data.get("total", count)
        title = data.get("title") or data.get("document_id") or "the knowledge base"
        return f"Listed {count}/{total} chunks from {title} (content omitted from history)"
    return output

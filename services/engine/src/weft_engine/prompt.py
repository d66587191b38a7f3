"""The messages of a new turn: system prompt, history, the user's message (SPEC E-02, E-24).

System prompt sections in the reference's order: the base (explicit body, else the pure
or the RAG template), runtime conventions, sources, tools, output, skills, memory,
citation protocol.
Per-turn facts (date, session) go into the user message's ``runtime_context`` and are
never persisted.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from weft_contracts import AgentConfig
from weft_llm import ChatMessage, ContentPart, SystemMessage, UserMessage

from weft_engine.vision import multimodal_content, route_images

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
SKILLS_INTRO = (
    "Skills: packaged instructions and scripts for specific tasks. When a task matches a "
    'skill, first read its instructions with read_file path="skill://<name>/SKILL.md"; '
    "read its other files the same way when the instructions point to them, and run its "
    'scripts with shell_exec skill_name="<name>" (the skill\'s folder is $WEFT_SKILL_DIR, '
    "read-only). Available skills:"
)
KNOWLEDGE_TOOLS = frozenset(
    {"search_knowledge", "read_document", "list_documents", "query_knowledge_graph"}
)
DISPLAY_HINTS = {
    "search_knowledge": "Searching the knowledge base",
    "read_document": "Reading a document",
    "list_documents": "Listing documents",
    "query_knowledge_graph": "Querying the knowledge graph",
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
        (bool(agent.skills) and "read_file" in tools, lambda: skills_section(agent)),
        ("search_memory" in tools, lambda: MEMORY),
        (uses_knowledge, lambda: CITATION_PROTOCOL),
    ]
    return "\n\n".join(render() for include, render in sections if include)


def skills_section(agent: AgentConfig) -> str:
    """Level 1 of the skills (SPEC S-04): each usable skill's name and description."""
    lines = [f"- {skill.name}: {' '.join(skill.description.split())}" for skill in agent.skills]
    return "\n".join([SKILLS_INTRO, *lines])


PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
"""``{{name}}`` as agent-config's placeholder list declares them."""
SCRIPT_LANGUAGES = (
    ("HANGUL", "Korean"), ("HIRAGANA", "Japanese"), ("KATAKANA", "Japanese"),
    ("CJK", "Chinese"), ("CYRILLIC", "Russian"), ("ARABIC", "Arabic"), ("HEBREW", "Hebrew"),
    ("GREEK", "Greek"), ("THAI", "Thai"), ("DEVANAGARI", "Hindi"),
)  # fmt: skip
"""Writing systems that name a language well enough for a prompt; kana before CJK, since
Japanese text mixes both."""


_FUNCTION_WORDS = {
    "German": "der die das und ist nicht ich wie was ein eine mit für auf es",
    "French": "le la les et est une des pas je que pour dans qui vous",
    "Spanish": "el los las y es una por que para con del cómo qué usted",
    "Portuguese": "o os as e é um uma não que para com do da você",
    "Italian": "il lo gli e è una non che per con del della come",
    "English": "the and is are a an not i you what how to of in it",
}
LATIN_FUNCTION_WORDS = {lang: frozenset(words.split()) for lang, words in _FUNCTION_WORDS.items()}
"""Frequent short words of Latin-script languages; a tie or no hit means English."""


def message_language(text: str) -> str:
    """The language of ``text``: its letters' script, and for Latin script the language
    with most frequent short words (a heuristic good enough for a prompt hint)."""
    names = [unicodedata.name(ch, "") for ch in text if ch.isalpha()]
    for script, language in SCRIPT_LANGUAGES:
        if any(name.startswith(script) for name in names):
            return language
    words = re.findall(r"\w+", text.lower())
    hits = {lang: sum(w in vocab for w in words) for lang, vocab in LATIN_FUNCTION_WORDS.items()}
    best = max(hits, key=lambda lang: hits[lang])
    return best if hits[best] > hits["English"] else "English"


def knowledge_base_list(agent: AgentConfig) -> str:
    """The ``{{knowledge_bases}}`` value: one line per KB in scope."""
    if agent.knowledge_bases:
        return "\n".join(
            f"- {kb.name or kb.id}" + (f": {kb.description}" if kb.description else "")
            for kb in agent.knowledge_bases
        )
    if not set(agent.allowed_tools) & KNOWLEDGE_TOOLS:
        return "none"
    return "all knowledge bases of the workspace"


def placeholder_values(
    agent: AgentConfig, query: str, *, user_name: str = "", now: datetime | None = None
) -> dict[str, str]:
    """Per-request values of the placeholders agent-config declares (PLACEHOLDERS)."""
    moment = now or datetime.now(UTC)
    return {
        "current_time": moment.strftime("%Y-%m-%d %H:%M %Z").strip(),
        "language": message_language(query),
        "knowledge_bases": knowledge_base_list(agent),
        "web_search_status": "enabled" if "web_search" in agent.allowed_tools else "disabled",
        "user_name": user_name,
        "agent_name": agent.name,
    }


def render_placeholders(text: str, values: Mapping[str, str]) -> str:
    """Substitute ``{{name}}`` with its value; unknown placeholders stay as they are."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def runtime_context(session_id: str) -> str:
    """Per-turn facts appended to the user's message (not persisted)."""
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    return f"<runtime_context>date: {today}; session: {session_id}</runtime_context>"


def initial_messages(
    agent: AgentConfig,
    history: list[ChatMessage],
    query: str,
    session_id: str = "",
    *,
    user_name: str = "",
    images: Sequence[str] = (),
) -> list[ChatMessage]:
    """System (placeholders substituted for this request), history, then the user's
    message with its runtime context."""
    return [
        system_message(agent, query, user_name=user_name),
        *history,
        user_message(agent, query, session_id, images=images),
    ]


def system_message(agent: AgentConfig, query: str, *, user_name: str = "") -> SystemMessage:
    """The agent's system prompt, placeholders substituted for this request."""
    values = placeholder_values(agent, query, user_name=user_name)
    return {"role": "system", "content": render_placeholders(system_prompt(agent), values)}


def user_message(
    agent: AgentConfig, query: str, session_id: str = "", *, images: Sequence[str] = ()
) -> UserMessage:
    """The user's message with its runtime context; its images as content parts when the
    model reads them (SPEC E-26; otherwise ``vision.ImageDescriber`` adds their text
    later)."""
    text = f"{query}\n\n{runtime_context(session_id)}"
    content: str | list[ContentPart] = text
    if route_images(agent, images) == "direct":
        content = multimodal_content(text, images)
    return {"role": "user", "content": content}


def display_hint(tool_name: str) -> str:
    """A human label of the tool call (SPEC E-18)."""
    return DISPLAY_HINTS.get(tool_name, f"Using {tool_name}")

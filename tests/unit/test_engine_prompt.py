"""System prompt sections in the reference's order (SPEC E-24) and display hints (E-18)."""

from __future__ import annotations

from weft_contracts import AgentConfig
from weft_engine.prompt import (
    CITATION_PROTOCOL,
    OUTPUT,
    PURE_BASE,
    RAG_BASE,
    RUNTIME_CONVENTIONS,
    display_hint,
    initial_messages,
    system_prompt,
)


def test_rag_agent_sections_in_order() -> None:
    prompt = system_prompt(AgentConfig(agent_id="a", model="m", allowed_tools=["search_knowledge"]))
    order = [prompt.index(s) for s in (RAG_BASE, RUNTIME_CONVENTIONS, OUTPUT, CITATION_PROTOCOL)]
    assert order == sorted(order)


def test_pure_agent_has_no_citation_protocol_and_explicit_body_wins() -> None:
    pure = system_prompt(AgentConfig(agent_id="a", model="m", allowed_tools=[]))
    assert pure.startswith(PURE_BASE) and CITATION_PROTOCOL not in pure
    custom = system_prompt(AgentConfig(agent_id="a", model="m", system_prompt="Be a pirate."))
    assert custom.startswith("Be a pirate.")


def test_runtime_context_goes_in_the_user_message_not_the_system_prompt() -> None:
    agent = AgentConfig(agent_id="a", model="m")
    messages = initial_messages(agent, [], "hello", "ses_1")
    assert "date: " not in messages[0]["content"]
    assert messages[-1]["content"].startswith("hello\n\n<runtime_context>date: ")
    assert "session: ses_1" in messages[-1]["content"]


def test_display_hints() -> None:
    assert display_hint("search_knowledge") == "Searching the knowledge base"
    assert display_hint("mcp_x") == "Using mcp_x"

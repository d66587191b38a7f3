"""The editable definition of an agent and the default rules applied to it.

``AgentDefinition`` is what the CRUD API accepts and stores (SPEC A-09); it is a subset of
the reference's ``CustomAgentConfig``. ``ensure_defaults`` is SPEC A-04 exactly,
``validate_for_save`` the service-level validation (max_iterations 0 -> 5, cap 100), and
``effective_reasoning_effort`` SPEC A-05.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from weft_contracts import AgentMode, QuestionSuggestions, ReasoningEffort
from weft_contracts.approvals import DEFAULT_APPROVAL_TIMEOUT_S

EFFORT_ORDER: tuple[str, ...] = ("off", "minimal", "low", "medium", "high", "xhigh", "max")
"""Levels from least to most; ``auto`` stands for the model's own choice (SPEC A-05)."""

MAX_ITERATIONS_CAP = 100
SANDBOX_MIN_COMPLETION_TOKENS = 8192
RUNTIME_COMPLETION_TOKENS = {AgentMode.QUICK_ANSWER: 2048, AgentMode.SMART_REASONING: 4096}
SANDBOX_COMPLETION_TOKENS = 24576


class AgentDefinition(BaseModel):
    """An agent as the editor sees it; unset fields get SPEC A-04 defaults when read."""

    model_config = ConfigDict(extra="forbid")

    name: str | dict[str, str] = Field(description="Display name, or names by locale.")
    description: str | dict[str, str] = Field(default="")
    mode: AgentMode = AgentMode.SMART_REASONING
    agent_type: str = Field(default="custom", max_length=64, description="Preset id (A-02).")
    model: str | None = Field(default=None, max_length=200)
    rerank_model_id: str | None = Field(default=None, max_length=200)
    system_prompt: str = Field(default="", max_length=100_000)
    temperature: float = Field(default=-1.0, ge=-100, le=2, description="<0: default 0.7.")
    max_completion_tokens: int = Field(default=0, ge=0, le=1_000_000)
    thinking: bool | None = None
    reasoning_effort: ReasoningEffort | None = None
    citation_enabled: bool | None = None
    access_level: Literal["read_only", "confirm", "auto_write"] | None = None
    approval_timeout_s: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_S,
        ge=10,
        le=7 * 24 * 3600,
        description="SPEC H-03: how long a prompt waits for a person.",
    )
    approval_on_timeout: Literal["deny", "escalate"] = Field(
        default="deny", description="What an unanswered prompt does at its expiry."
    )
    approver_group: str | None = Field(default=None, min_length=1, max_length=128)
    escalation_timeout_s: float = Field(default=3600.0, ge=10, le=7 * 24 * 3600)
    always_ask_tools: list[str] = Field(
        default_factory=list, max_length=100,
        description="SPEC H-01: tools asked about at every access level, whatever the grants.",
    )  # fmt: skip
    max_iterations: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    llm_call_timeout_s: float = Field(default=0, ge=0, le=86_400)
    allowed_tools: list[str] | None = Field(default=None, max_length=100)
    sandbox_enabled: bool = False
    skills_selection_mode: Literal["all", "selected", "none"] = Field(
        default="all",
        description="SPEC S-04: which installed skills the agent may use (with a sandbox).",
    )
    selected_skills: list[str] = Field(
        default_factory=list, max_length=100, description="The skills of ``selected`` mode."
    )
    mcp_selection_mode: Literal["all", "selected", "none"] = Field(
        default="none",
        description="SPEC T-19: which of the tenant's MCP servers the agent may use (a "
        "shared agent: only the ones it names; ``all`` counts as none for it).",
    )
    mcp_services: list[str] = Field(
        default_factory=list, max_length=50, description="The MCP servers of ``selected`` mode."
    )
    mcp_auth_wait_timeout: float = Field(
        default=0,
        le=7 * 24 * 3600,
        description="SPEC H-06: seconds a turn waits for the user to authorise an MCP "
        "server; at most 0 means 600.",
    )
    kb_selection_mode: Literal["all", "selected", "none"] = "all"
    knowledge_base_ids: list[str] = Field(default_factory=list, max_length=100)
    web_search_enabled: bool = False
    web_search_max_results: int = Field(default=0, ge=0, le=50)
    memory_enabled: bool | None = None
    history_turns: int | None = Field(default=None, ge=0, le=100)
    context_window: int = Field(
        default=200_000, ge=1024, le=10_000_000, description="MaxContextTokens (A-11)."
    )
    retain_retrieval_history: bool = Field(default=False, description="SPEC T-20.")
    query_rewrite_enabled: bool = Field(
        default=True,
        description="Quick-answer: a follow-up question is rewritten into a standalone "
        "search query from the conversation before retrieval (SPEC C-04). Smart-reasoning "
        "agents ignore it (the model writes its own search queries).",
    )
    faq_priority_enabled: bool = Field(
        default=False,
        description="Quick-answer (SPEC C-04): FAQ entries first; one whose match plus "
        "faq_score_boost reaches faq_direct_answer_threshold answers without a generation.",
    )
    faq_direct_answer_threshold: float = Field(default=0.9, ge=0, le=1)
    faq_score_boost: float = Field(default=0.1, ge=0, le=1)
    intent_detection_enabled: bool = Field(
        default=False,
        description="Quick-answer (SPEC C-04): a short model call first decides whether the "
        "message needs the knowledge bases (a greeting does not).",
    )
    query_expansion_enabled: bool = Field(
        default=False,
        description="Quick-answer (SPEC C-04): the same call offers up to two other "
        "phrasings, searched beside the question.",
    )
    question_suggestions: QuestionSuggestions | None = Field(
        default=None,
        description="Starters and follow-ups (SPEC Q-01/Q-02); unset: the SPEC's defaults.",
    )
    image_upload_enabled: bool = Field(
        default=False, description="Chat requests may carry images (SPEC E-26)."
    )
    vlm_model_id: str | None = Field(
        default=None,
        max_length=200,
        description="Describes images for a chat model without vision (SPEC E-26).",
    )
    hidden: bool = Field(default=False, description="Built-ins only: not listed, loadable by id.")


def ensure_defaults(agent: AgentDefinition, default_model: str) -> AgentDefinition:
    """SPEC A-04 ``EnsureDefaults``: fill unset or out-of-range fields."""
    smart = agent.mode == AgentMode.SMART_REASONING
    tokens = agent.max_completion_tokens
    if tokens == 0:
        tokens = RUNTIME_COMPLETION_TOKENS[agent.mode]
        if smart and agent.sandbox_enabled:
            tokens = SANDBOX_COMPLETION_TOKENS
    elif smart and agent.sandbox_enabled and tokens < SANDBOX_MIN_COMPLETION_TOKENS:
        tokens = SANDBOX_MIN_COMPLETION_TOKENS
    return agent.model_copy(
        update={
            "model": agent.model or default_model,
            "temperature": 0.7 if agent.temperature < 0 else agent.temperature,
            "max_completion_tokens": tokens,
            "max_iterations": 10 if agent.max_iterations is None else agent.max_iterations,
            "llm_call_timeout_s": agent.llm_call_timeout_s or 120.0,
            "citation_enabled": True if agent.citation_enabled is None else agent.citation_enabled,
            "access_level": agent.access_level or "auto_write",
            "history_turns": 5 if agent.history_turns is None else agent.history_turns,
            "web_search_max_results": agent.web_search_max_results or 5,
            "question_suggestions": agent.question_suggestions or QuestionSuggestions(),
        }
    )


def normalize_max_iterations(value: int | None) -> int | None:
    """Service validation: 0 -> 5, negative -> -1 (unlimited), above the cap -> 100."""
    if value is None:
        return None
    if value == 0:
        return 5
    if value < 0:
        return -1
    return min(value, MAX_ITERATIONS_CAP)


def effective_reasoning_effort(
    reasoning_effort: str | None,
    thinking: bool | None,
    *,
    request_override: str | None = None,
    supported: Sequence[str] | None = None,
) -> str | None:
    """SPEC A-05: the request overrides the agent; ``reasoning_effort`` wins over
    ``thinking`` (true ~ ``auto``, false ~ ``off``); neither set -> None (no reasoning).

    ``supported`` are the model's levels (None: unknown, no adjustment; empty: the model
    does not reason, so None). A level the model lacks is adjusted down to the nearest
    level it has; ``auto`` without support starts from ``medium``; when nothing is at or
    below the level (``off`` on a model that always reasons) the lowest level is used.
    """
    effort = request_override or reasoning_effort
    if effort is None and thinking is not None:
        effort = "auto" if thinking else "off"
    if effort is None or supported is None or effort in supported:
        return effort
    levels = [level for level in EFFORT_ORDER if level in supported]
    if not levels:
        return None
    if effort == "auto":
        effort = "medium"  # the model has no "auto": start from the middle level
    rank = EFFORT_ORDER.index(effort)
    for level in reversed(EFFORT_ORDER[: rank + 1]):
        if level in supported:
            return level
    return levels[0]


def synthesis_reasoning_effort(effort: str | None, supported: Sequence[str] | None) -> str | None:
    """SPEC E-21: a closing synthesis runs with thinking off, as far as the model allows:
    ``off`` clamped to its levels (a model that always reasons gets its lowest level, one
    that does not reason gets none). For a model whose levels are unknown, only a turn that
    already sends an effort sends ``off``: an unknown model may refuse the parameter."""
    if supported is None:
        return None if effort is None else "off"
    return effective_reasoning_effort("off", None, supported=supported)


def display_name(name: str | dict[str, str], locale: str | None = None) -> str:
    """The name in ``locale`` if defined, else its ``default``."""
    if isinstance(name, str):
        return name
    if locale and locale in name:
        return name[locale]
    return name.get("default", next(iter(name.values()), ""))

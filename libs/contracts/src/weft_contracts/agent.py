"""The immutable runtime configuration of an agent, resolved once per request (SPEC A-08, A-11)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from weft_contracts.approvals import ApprovalPolicy
from weft_contracts.mcp import DEFAULT_AUTH_WAIT_S, McpServerRef

ReasoningEffort = Literal["off", "auto", "minimal", "low", "medium", "high", "xhigh", "max"]
"""SPEC A-05 levels; ``auto`` leaves the choice to the model, ``off`` asks for none."""


class AgentMode(StrEnum):
    """SPEC A-01: the classic RAG pipeline or the ReAct loop."""

    QUICK_ANSWER = "quick-answer"
    SMART_REASONING = "smart-reasoning"


class KnowledgeBaseInfo(BaseModel):
    """A knowledge base in a turn's scope, as the ``{{knowledge_bases}}`` placeholder shows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str = ""
    description: str = ""


class SkillInfo(BaseModel):
    """A skill the agent may use this turn, as level 1 of the prompt shows it (SPEC S-04)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(max_length=64)
    description: str = Field(default="", max_length=1024)


class FaqSettings(BaseModel):
    """SPEC C-04: how quick-answer treats FAQ entries and the question before retrieval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    priority_enabled: bool = Field(
        default=False,
        description="FAQ entries found come before document passages (ranked by match "
        "plus score_boost), and one at or above direct_answer_threshold is the answer.",
    )
    direct_answer_threshold: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="The boosted match at or above which an FAQ answer is given as is, "
        "without a generation.",
    )
    score_boost: float = Field(default=0.1, ge=0, le=1, description="Added to FAQ matches.")
    intent_detection: bool = Field(
        default=False,
        description="Ask the model first whether the message needs the knowledge bases at "
        "all (a greeting does not): one short call; unclear answers retrieve.",
    )
    query_expansion: bool = Field(
        default=False,
        description="Search the knowledge bases with up to two other phrasings of the "
        "question as well (from the same short call as intent detection).",
    )


class AgentConfig(BaseModel):
    """Snapshot of an agent's settings that travels with ``ChatRequested``.

    The engine never reads agent rows itself: what it runs is exactly this snapshot.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: str = Field(description="Id of the agent (built-in or custom).")
    name: str = Field(default="", description="Display name.")
    mode: AgentMode = AgentMode.SMART_REASONING
    model: str = Field(description="Model name sent to the OpenAI-compatible endpoint.")
    system_prompt: str = Field(default="", description="Explicit system prompt body, if any.")
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_iterations: int = Field(default=10, ge=-1, le=100, description="-1 means unlimited.")
    max_completion_tokens: int = Field(default=4096, ge=1)
    llm_call_timeout_s: float = Field(default=120.0, gt=0, description="Stall timeout (E-06).")
    allowed_tools: list[str] = Field(default_factory=list, description="Effective tool list.")
    knowledge_base_ids: list[str] = Field(default_factory=list, description="Search scope.")
    key_knowledge_base_ids: list[str] | None = Field(
        default=None,
        description="SPEC A-09: the caller's API key is limited to these knowledge bases "
        "(None: not limited), carried to tools even when the agent searches none.",
    )
    history_turns: int = Field(default=5, ge=0)
    tool_output_max_chars: int = Field(default=24000, ge=256, description="SPEC T-03.")
    context_window: int = Field(default=200_000, ge=1024, description="SPEC A-11, M-03.")
    retain_retrieval_history: bool = Field(default=False, description="SPEC T-20.")
    memory_enabled: bool = Field(default=False, description="Long-term memory (SPEC M-10).")
    web_search_max_results: int = Field(
        default=5, ge=1, le=50, description="SPEC C-04: results of quick-answer's web search."
    )
    query_rewrite: bool = Field(
        default=False,
        description="SPEC C-04: a quick-answer turn with history first rewrites the question "
        "into a standalone search query.",
    )
    faq: FaqSettings = Field(
        default_factory=lambda: FaqSettings(),
        description="SPEC C-04: quick-answer's FAQ priority, intent detection and expansion.",
    )
    search_document_ids: list[str] = Field(
        default_factory=list,
        max_length=500,
        description="SPEC A-11: the documents this turn's @doc/@tag mentions narrowed the "
        "search to (within knowledge_base_ids); empty with no search_faq_tags: no mention, "
        "every document.",
    )
    search_faq_tags: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="SPEC A-11: the @tag mentions that select FAQ entries carrying the tag "
        "(within knowledge_base_ids). Under a mention (this or search_document_ids not "
        "empty) only the mentioned documents and these FAQ entries are read.",
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="SPEC A-05, already resolved for the model (request override, thinking, "
        "clamped to the model's levels); None: the request carries no reasoning effort.",
    )
    synthesis_reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="SPEC E-21: the effort of a closing synthesis (max iterations, a rescue "
        "after a stop or a failing model): thinking off as far as the model allows ('off' "
        "clamped to its levels); None: that request carries no reasoning effort.",
    )
    knowledge_bases: list[KnowledgeBaseInfo] = Field(
        default_factory=list,
        description="Names and descriptions of the KBs in scope (the {{knowledge_bases}} "
        "placeholder); empty scope = every KB of the retrieval tenant.",
    )
    retrieval_tenant_id: str | None = Field(
        default=None,
        description="SPEC E-26: a shared agent's owner tenant, whose knowledge bases its "
        "tools search; None = the caller's tenant.",
    )
    shared: bool = Field(default=False, description="SPEC A-10: shared by another tenant.")
    image_upload_enabled: bool = Field(
        default=False, description="The agent accepts images in chat requests (SPEC E-26)."
    )
    vision: bool = Field(
        default=False,
        description="SPEC E-26: the chat model reads image parts itself (model capability "
        "table); False: images are described by ``vlm_model`` first.",
    )
    vlm_model: str | None = Field(
        default=None,
        description="SPEC E-26: the model that describes images for a chat model without "
        "vision (the owner's for a shared agent); None: images cannot be read.",
    )
    skills: list[SkillInfo] = Field(
        default_factory=list,
        description="SPEC S-04: the installed skills this agent may use this turn (its "
        "skills_selection_mode and selected_skills applied); empty without a sandbox or "
        "read_file.",
    )
    mcp_servers: list[McpServerRef] = Field(
        default_factory=list,
        description="SPEC T-19: the MCP servers this agent may use this turn (its "
        "mcp_selection_mode and mcp_services applied; a shared agent's explicit selection).",
    )
    mcp_auth_wait_s: float = Field(
        default=DEFAULT_AUTH_WAIT_S,
        gt=0,
        description="SPEC H-06: how long the turn waits for the user to authorise a server.",
    )
    approval: ApprovalPolicy = Field(
        default_factory=ApprovalPolicy,
        description="SPEC H-01..H-03: access level (capped by the tenant's maximum), "
        "prompt timeout and escalation, tools always asked about.",
    )

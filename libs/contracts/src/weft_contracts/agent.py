"""The immutable runtime configuration of an agent, resolved once per request (SPEC A-08, A-11)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class AgentMode(StrEnum):
    """SPEC A-01: the classic RAG pipeline or the ReAct loop."""

    QUICK_ANSWER = "quick-answer"
    SMART_REASONING = "smart-reasoning"


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
    history_turns: int = Field(default=5, ge=0)
    tool_output_max_chars: int = Field(default=24000, ge=256, description="SPEC T-03.")
    context_window: int = Field(default=200_000, ge=1024, description="SPEC A-11, M-03.")
    retain_retrieval_history: bool = Field(default=False, description="SPEC T-20.")
    memory_enabled: bool = Field(default=False, description="Long-term memory (SPEC M-10).")

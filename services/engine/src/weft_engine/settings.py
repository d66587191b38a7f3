"""Engine settings."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from weft_platform.budgets import TokenBudgetSettings


class EngineSettings(TokenBudgetSettings):
    """Engine settings; the LLM endpoint uses the ``openai`` package's own variable names."""

    service_name: str = "engine"
    http_port: int = 8082
    openai_base_url: str = Field(
        default="http://127.0.0.1:8090/v1",
        validation_alias=AliasChoices("OPENAI_BASE_URL", "WEFT_OPENAI_BASE_URL"),
    )
    openai_api_key: str = Field(
        default="scripted-llm-test-double",
        validation_alias=AliasChoices("OPENAI_API_KEY", "WEFT_OPENAI_API_KEY"),
    )
    llm_http_backend: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp",
        description="HTTP transport under the openai client (weft_llm.openai_model).",
    )
    memory_url: str = "http://127.0.0.1:8085"
    memory_retry_window_s: float = Field(
        default=20.0,
        ge=0,
        description="Calls to memory (history, checkpoints, token scale, recall) are tried "
        "again for this long before the turn is told memory is unavailable: a memory "
        "restart (5-15 s) is waited out; see docs/operations.md.",
    )
    tool_deadline_s: float = Field(default=60.0, gt=0, description="SPEC E-17 default.")
    turn_deadline_s: float = Field(
        default=20 * 60,
        gt=0,
        description="SPEC E-20: wall-clock bound of a turn; above the longest tool timeout "
        "(shell_exec 605 s) so a turn can always wait for its slowest tool.",
    )
    turn_state_ttl_s: int = Field(default=6 * 3600, ge=60)
    llm_retry_backoff_s: tuple[float, ...] = (1.0, 2.0)
    delta_coalesce_ms: float = Field(default=30.0, ge=0, description="Thought/answer window.")
    max_inflight_turns: int = Field(default=64, ge=1, description="Running steps per replica.")
    turn_tenant_max_inflight: int = Field(
        default=32,
        ge=0,
        description="Turns one tenant has open at once across every replica (0: no cap); "
        "a turn over it waits as a pending start (docs/fairness.md).",
    )
    turn_tenant_max_local: int | None = Field(
        default=None,
        ge=0,
        description="Step slots of one replica a single tenant may hold at once; unset: "
        "all but one (max_inflight_turns - 1, at least 1), so that a tenant whose turns "
        "all land on one replica leaves it a slot for the others; 0: no limit per replica.",
    )
    lease_ttl_s: float = Field(default=6.0, gt=1, description="Takeover delay after a crash.")
    shutdown_grace_s: float = Field(default=15.0, ge=0)
    audit_interval_s: float = Field(
        default=5.0,
        gt=0,
        description="TurnAuditor: seconds between sweeps for turns whose Redis state was "
        "lost (with the Kafka read, the bound before such a turn gets its error).",
    )
    audit_grace_s: float = Field(
        default=3.0, ge=0, description="TurnAuditor: younger turns are not audited yet."
    )
    audit_lookback_s: float = Field(
        default=6 * 3600, gt=0, description="TurnAuditor: turns started this recently."
    )
    audit_requests_window_s: float = Field(
        default=25 * 60,
        gt=0,
        description="After Redis lost its data, requests this recent that left no trace "
        "(queued behind a running turn) are read back from agent.requests and started; "
        "above the turn deadline, the longest a queued request can wait.",
    )

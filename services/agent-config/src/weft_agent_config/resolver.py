"""AgentResolver: (tenant, agent id, request) -> immutable AgentConfig (SPEC A-04, A-08)."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import AgentConfig, AgentMode
from weft_storage.models import Agent

DEFAULT_COMPLETION_TOKENS = {AgentMode.QUICK_ANSWER: 2048, AgentMode.SMART_REASONING: 4096}


class AgentNotFound(LookupError):
    """No built-in or tenant agent has this id."""


class InvalidAgent(ValueError):
    """A stored agent cannot be turned into a valid configuration."""


def load_builtin_agents() -> dict[str, dict[str, Any]]:
    """Built-in agent definitions from the YAML shipped with the service, by id."""
    text = resources.files("weft_agent_config").joinpath("builtin_agents.yaml").read_text()
    return {a["id"]: a for a in yaml.safe_load(text)["agents"]}


def ensure_defaults(raw: dict[str, Any], default_model: str) -> dict[str, Any]:
    """Fill unset or out-of-range fields the way SPEC A-04 says."""
    cfg = dict(raw)
    mode = AgentMode(cfg.get("mode") or AgentMode.SMART_REASONING)
    cfg["mode"] = mode
    cfg["model"] = cfg.get("model") or default_model
    if float(cfg.get("temperature", -1)) < 0:
        cfg["temperature"] = 0.7
    if not cfg.get("max_completion_tokens"):
        cfg["max_completion_tokens"] = DEFAULT_COMPLETION_TOKENS[mode]
    iterations = int(cfg.get("max_iterations", 10) or 5)
    cfg["max_iterations"] = -1 if iterations < 0 else min(iterations, 100)
    if not cfg.get("llm_call_timeout_s"):
        cfg["llm_call_timeout_s"] = 120.0
    if cfg.get("allowed_tools") is None:
        cfg["allowed_tools"] = ["search_knowledge"]
    return cfg


class AgentResolver:
    """Looks agents up (built-ins first, then the tenant's) and applies defaults."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], default_model: str):
        self._sessions = sessions
        self._default_model = default_model
        self._builtins = load_builtin_agents()

    async def resolve(
        self, tenant_id: str, agent_id: str, knowledge_base_ids: list[str] | None = None
    ) -> AgentConfig:
        """The runtime config of ``agent_id`` for this tenant and request."""
        raw = await self._definition(tenant_id, agent_id)
        fields = {k: v for k, v in raw.items() if k in AgentConfig.model_fields}
        fields["agent_id"] = agent_id
        fields["name"] = _display_name(raw.get("name"))
        if knowledge_base_ids is not None:
            fields["knowledge_base_ids"] = knowledge_base_ids
        try:
            return AgentConfig.model_validate(ensure_defaults(fields, self._default_model))
        except ValidationError as exc:
            raise InvalidAgent(f"agent {agent_id!r} has an invalid configuration: {exc}") from exc

    async def _definition(self, tenant_id: str, agent_id: str) -> dict[str, Any]:
        if agent_id in self._builtins:
            return self._builtins[agent_id]
        async with self._sessions() as s:
            row = await s.scalar(
                select(Agent).where(
                    Agent.tenant_id == tenant_id, Agent.id == agent_id, Agent.deleted_at.is_(None)
                )
            )
        if row is None:
            raise AgentNotFound(agent_id)
        return {"name": row.name, **row.config}


def _display_name(name: Any) -> str:
    if isinstance(name, dict):
        return str(name.get("default", ""))
    return str(name or "")

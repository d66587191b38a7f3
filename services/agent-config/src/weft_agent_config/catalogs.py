"""Built-in agents (SPEC A-03) and type presets (A-02), read from the YAML files shipped
with the service."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from weft_contracts import AgentMode

from weft_agent_config.definition import AgentDefinition
from weft_agent_config.tool_policy import missing_tools

PRESET_FIELDS = ("temperature", "max_iterations", "allowed_tools", "web_search_enabled")
"""Fields a preset prefills when the creator left them unset."""


def _yaml(name: str) -> Any:
    return yaml.safe_load(resources.files("weft_agent_config").joinpath(name).read_text())


@dataclass(frozen=True)
class BuiltinAgents:
    """The built-in agents by id, plus ids reserved without a definition."""

    agents: dict[str, AgentDefinition]
    reserved: frozenset[str]
    unavailable: dict[str, str] = field(default_factory=dict)
    """Built-ins that cannot run here, with the reason: their tools do not exist yet. They
    are not listed, show ``available: false`` by id, and a chat with them is refused."""

    @classmethod
    def load(cls) -> BuiltinAgents:
        """Parse ``builtin_agents.yaml``; an invalid definition fails the start."""
        raw = _yaml("builtin_agents.yaml")
        agents = {
            a["id"]: AgentDefinition.model_validate({k: v for k, v in a.items() if k != "id"})
            for a in raw["agents"]
        }
        unavailable = {
            agent_id: "it needs tools this deployment does not run yet: " + ", ".join(missing)
            for agent_id, agent in agents.items()
            if (missing := missing_tools(agent.allowed_tools))
        }
        return cls(agents, frozenset(raw.get("reserved_ids", [])), unavailable)

    def is_builtin_id(self, agent_id: str) -> bool:
        """Built-in or reserved: tenants can never create, edit or delete these ids."""
        return (
            agent_id in self.agents or agent_id in self.reserved or agent_id.startswith("builtin-")
        )

    def listed(self) -> dict[str, AgentDefinition]:
        """Built-ins shown in the UI list (hidden or unavailable ones load by id only)."""
        return {k: v for k, v in self.agents.items() if not v.hidden and k not in self.unavailable}


@dataclass(frozen=True)
class TypePresets:
    """The type presets of smart-reasoning agents by id."""

    presets: dict[str, dict[str, Any]]

    @classmethod
    def load(cls) -> TypePresets:
        """Parse ``type_presets.yaml``."""
        return cls({p["id"]: p for p in _yaml("type_presets.yaml")["presets"]})

    def normalize_type(self, agent_type: str | None) -> str:
        """Unknown or empty type -> ``custom`` (SPEC A-02)."""
        return agent_type if agent_type and agent_type in self.presets else "custom"

    def prefill(self, agent: AgentDefinition) -> AgentDefinition:
        """Fill the fields the creator did not set from the agent's preset (smart-reasoning
        only); fields the creator set always win."""
        agent_type = self.normalize_type(agent.agent_type)
        update: dict[str, Any] = {"agent_type": agent_type}
        if agent.mode == AgentMode.SMART_REASONING:
            preset = self.presets[agent_type]
            for field in PRESET_FIELDS:
                if field in preset and field not in agent.model_fields_set:
                    update[field] = preset[field]
        return agent.model_copy(update=update)

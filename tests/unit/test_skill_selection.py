"""Level 1 of the skills (SPEC S-04): which installed skills a turn's agent may use
(skills_selection_mode all/selected/none, only with a sandbox and read_file, none in
skill-install mode) and the system prompt's skills section that lists them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

import pytest
from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.definition import AgentDefinition
from weft_agent_config.resolver import SKILL_INSTALLER, AgentResolver, runtime_config
from weft_agent_config.store import AgentStore
from weft_contracts import AgentConfig, SkillInfo
from weft_engine.prompt import OUTPUT, SKILLS_INTRO, system_prompt
from weft_storage.agent_config.skills import SkillStore, SkillSummary

INSTALLED = {"t1": ["alpha", "beta", "gamma"], "t2": ["secret"]}


class _Skills:
    """The tenants' installed skills, as SkillStore.list answers."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str] | None]] = []

    async def list(self, tenant_id: str, names: Sequence[str] | None = None) -> list[SkillSummary]:
        self.asked.append((tenant_id, None if names is None else list(names)))
        return [
            SkillSummary(
                name=n,
                description=f"does {n}",
                digest="d",
                size_bytes=1,
                file_count=1,
                updated_at=datetime.now(UTC),
            )
            for n in INSTALLED.get(tenant_id, [])
            if names is None or n in names
        ]


async def _usable(agent: AgentDefinition, agent_id: str = "a1", tenant: str = "t1") -> list[str]:
    resolver = AgentResolver(
        cast(AgentStore, None), BuiltinAgents.load(), "m", skills=cast(SkillStore, _Skills())
    )
    config = runtime_config(agent_id, agent, default_model="m", knowledge_base_ids=[])
    return [s.name for s in await resolver.usable_skills(tenant, agent_id, agent, config)]


def _agent(**fields: object) -> AgentDefinition:
    base: dict[str, object] = {"name": "x", "sandbox_enabled": True,
                               "allowed_tools": ["read_file", "shell_exec"]}  # fmt: skip
    return AgentDefinition.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ["alpha", "beta", "gamma"]),
        ({"skills_selection_mode": "selected", "selected_skills": ["beta", "secret", "nope"]},
         ["beta"]),
        ({"skills_selection_mode": "selected"}, []),
        ({"skills_selection_mode": "none"}, []),
        ({"sandbox_enabled": False}, []),
        ({"allowed_tools": ["shell_exec"]}, []),
    ],
)  # fmt: skip
async def test_the_selection_mode_decides_the_usable_skills(
    fields: dict[str, object], expected: list[str]
) -> None:  # SPEC S-04
    assert await _usable(_agent(**fields)) == expected


async def test_only_the_tenants_own_skills_and_none_when_installing() -> None:  # SPEC S-04
    assert await _usable(_agent(), tenant="t2") == ["secret"]
    assert await _usable(_agent(), tenant="t3") == []
    assert await _usable(_agent(), agent_id=SKILL_INSTALLER) == []


def test_the_prompt_lists_the_skills_only_with_read_file() -> None:  # SPEC S-04 level 1
    skills = [SkillInfo(name="alpha", description="Does\n alpha  things.")]
    agent = AgentConfig(agent_id="a", model="m", allowed_tools=["read_file"], skills=skills)
    prompt = system_prompt(agent)
    assert SKILLS_INTRO in prompt and "\n- alpha: Does alpha things." in prompt
    assert prompt.index(OUTPUT) < prompt.index(SKILLS_INTRO)
    without = agent.model_copy(update={"allowed_tools": ["shell_exec"]})
    assert SKILLS_INTRO not in system_prompt(without)
    empty = agent.model_copy(update={"skills": []})
    assert SKILLS_INTRO not in system_prompt(empty)

"""Sharing routes of agent-config (SPEC A-10): organisations (internal only), sharing an
agent with an organisation, and the recipients' read-only view and switch."""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel, Field

from weft_agent_config.agent_service import AgentService
from weft_agent_config.definition import AgentDefinition, display_name
from weft_agent_config.sharing import (
    NotShareable,
    Role,
    SharedAgentRef,
    SharingRefused,
    SharingStore,
    check_shareable,
    check_sharer_role,
)
from weft_agent_config.store import StoredAgent
from weft_agent_config.tool_policy import normalize_allowed_tools

CAPABILITY_FIELDS = (
    "mode", "agent_type", "web_search_enabled", "sandbox_enabled", "memory_enabled",
    "kb_selection_mode", "reasoning_effort", "thinking", "image_upload_enabled",
)  # fmt: skip
"""What a recipient may see of a shared agent besides its names: never the prompt, the
creator, the models or the owner's knowledge base ids (SPEC A-10)."""


class OrganisationCreate(BaseModel):
    """Body of ``POST /internal/organisations``."""

    name: str = Field(min_length=1, max_length=200)


class MemberSet(BaseModel):
    """Body of ``PUT /internal/organisations/{id}/members/{tenant_id}``."""

    role: Role


class ShareCreate(BaseModel):
    """Body of ``POST .../agents/{id}/shares``."""

    organisation_id: str = Field(min_length=1, max_length=64)


class SharedAgentSwitch(BaseModel):
    """Body of ``PUT .../shared/{id}``: the recipient switches the agent off or on."""

    disabled: bool


def capability_view(ref: SharedAgentRef, agent: AgentDefinition) -> dict[str, Any]:
    """A shared agent as a recipient sees it (read-only, viewer)."""
    view: dict[str, Any] = {f: getattr(agent, f) for f in CAPABILITY_FIELDS}
    view.update(
        id=ref.agent_id,
        name=display_name(agent.name),
        names=agent.name if isinstance(agent.name, dict) else {"default": agent.name},
        description=display_name(agent.description),
        allowed_tools=normalize_allowed_tools(agent.allowed_tools),
        builtin=False,
        shared=True,
        permission="viewer",
        disabled=ref.disabled,
        organisation_ids=list(ref.organisation_ids),
    )
    return view


class SharingService:
    """Sharing rules over the agent store and the sharing store."""

    def __init__(self, agents: AgentService, store: SharingStore):
        self.agents = agents
        self.store = store

    async def shared_view(self, tenant_id: str, agent_id: str) -> dict[str, Any] | None:
        """The recipient's view of ``agent_id`` when it is shared with the tenant."""
        ref = await self.store.find_shared(tenant_id, agent_id)
        if ref is None:
            return None
        owned = await self.agents.store.get(ref.owner_tenant_id, agent_id)
        return capability_view(ref, owned.definition) if owned else None

    async def list_shared(self, tenant_id: str, *, include_disabled: bool) -> list[dict[str, Any]]:
        """Agents shared with the tenant, read-only views."""
        return [
            capability_view(ref, StoredAgent(row).definition)
            for ref, row in await self.store.shared_agents(tenant_id)
            if include_disabled or not ref.disabled
        ]

    async def refuse_shared(self, tenant_id: str, agent_id: str) -> None:
        """A recipient can never edit, delete, copy or re-share a shared agent (403)."""
        if await self.store.find_shared(tenant_id, agent_id) is not None:
            raise HTTPException(403, f"agent {agent_id!r} is shared with you read-only")

    async def share(self, tenant_id: str, user_id: str, agent_id: str, org_id: str) -> bool:
        """Owner only, sharer editor+, agent shareable; True when newly shared."""
        self.agents.refuse_builtin(agent_id)
        owned = await self.agents.store.get(tenant_id, agent_id)
        if owned is None:
            await self.refuse_shared(tenant_id, agent_id)
            raise HTTPException(404, f"agent {agent_id!r} not found")
        if not await self.store.organisation_exists(org_id):
            raise HTTPException(404, f"organisation {org_id!r} not found")
        try:
            check_sharer_role(await self.store.role(org_id, tenant_id))
            check_shareable(owned.definition)
        except SharingRefused as exc:
            raise HTTPException(403, str(exc)) from None
        except NotShareable as exc:
            raise HTTPException(400, str(exc)) from None
        return await self.store.share(tenant_id, agent_id, org_id, user_id)

    async def keep_shareable(self, tenant_id: str, agent_id: str, agent: AgentDefinition) -> None:
        """An owner's edit may not make a shared agent unshareable (400): recipients would
        otherwise fall back to defaults the owner never chose."""
        if not await self.store.shares_of(tenant_id, agent_id):
            return
        try:
            check_shareable(agent)
        except NotShareable as exc:
            raise HTTPException(400, f"agent {agent_id!r} is shared: {exc}") from None

    async def owned(self, tenant_id: str, agent_id: str) -> None:
        """404 unless the tenant owns the agent (403 when it is only shared with it)."""
        if await self.agents.store.get(tenant_id, agent_id) is None:
            await self.refuse_shared(tenant_id, agent_id)
            raise HTTPException(404, f"agent {agent_id!r} not found")


def sharing_router(svc: SharingService) -> APIRouter:
    """Internal routes: organisations, shares, shared agents."""
    router = APIRouter(prefix="/internal", tags=["sharing"])
    Tenant = Annotated[str, Query(min_length=1, max_length=128)]
    User = Annotated[str, Query(max_length=128)]

    @router.post("/organisations", status_code=201)
    async def create_organisation(body: OrganisationCreate) -> dict[str, str]:
        return {"id": await svc.store.create_organisation(body.name), "name": body.name}

    @router.put("/organisations/{org_id}/members/{member_tenant}")
    async def set_member(org_id: str, member_tenant: str, body: MemberSet) -> dict[str, str]:
        if not await svc.store.organisation_exists(org_id):
            raise HTTPException(404, f"organisation {org_id!r} not found")
        await svc.store.set_member(org_id, member_tenant, body.role)
        return {"organisation_id": org_id, "tenant_id": member_tenant, "role": body.role}

    @router.get("/agents/shared")
    async def list_shared(tenant_id: Tenant) -> list[dict[str, Any]]:
        return await svc.list_shared(tenant_id, include_disabled=True)

    @router.put("/agents/shared/{agent_id}")
    async def switch_shared(
        tenant_id: Tenant, agent_id: str, body: SharedAgentSwitch
    ) -> dict[str, Any]:
        if await svc.store.find_shared(tenant_id, agent_id) is None:
            raise HTTPException(404, f"no agent {agent_id!r} is shared with your tenant")
        await svc.store.set_disabled(tenant_id, agent_id, body.disabled)
        view = await svc.shared_view(tenant_id, agent_id)
        if view is None:
            raise HTTPException(404, f"no agent {agent_id!r} is shared with your tenant")
        return view

    @router.post("/agents/{agent_id}/shares", status_code=201)
    async def share(
        tenant_id: Tenant, agent_id: str, body: ShareCreate, response: Response, user_id: User = ""
    ) -> dict[str, Any]:
        created = await svc.share(tenant_id, user_id, agent_id, body.organisation_id)
        response.status_code = 201 if created else 200  # re-sharing is idempotent
        return {"agent_id": agent_id, "organisation_id": body.organisation_id, "created": created}

    @router.get("/agents/{agent_id}/shares")
    async def list_shares(tenant_id: Tenant, agent_id: str) -> list[dict[str, Any]]:
        await svc.owned(tenant_id, agent_id)
        return await svc.store.shares_of(tenant_id, agent_id)

    @router.delete("/agents/{agent_id}/shares/{org_id}", status_code=204)
    async def unshare(tenant_id: Tenant, agent_id: str, org_id: str) -> Response:
        await svc.owned(tenant_id, agent_id)
        if not await svc.store.unshare(tenant_id, agent_id, org_id):
            raise HTTPException(404, f"agent {agent_id!r} is not shared with {org_id!r}")
        return Response(status_code=204)

    return router

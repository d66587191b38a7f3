"""Memory's approval routes, as the gateway calls them (docs/approvals.md).

Every call carries the caller's request credential (``outbound_credential``, set by
``ApiKeyAuth``): memory applies the access rule itself (same tenant, and the prompt's own
user or a key with ``approvals:decide``) and answers 404 for anything else, which the
client passes on unchanged (never 403: no existence oracle). The tenant and user are also
named in the query, as on memory's other routes; its guard checks they are the
credential's.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from weft_gateway.auth import Principal
from weft_gateway.clients import ServiceClient

PromptView = dict[str, Any]
"""A prompt as memory shows it (never its turn credential)."""


class ApprovalsClient(ServiceClient):
    """Prompts, decisions and grants, owned by memory."""

    async def list_prompts(
        self, who: Principal, session_id: str, status: str, *, timeout_s: float | None = None
    ) -> Any:
        """``{"prompts": [PromptView]}`` of one session (``pending`` or ``all``);
        ``timeout_s``: fail fast, without retries (a stream being opened)."""
        path = f"/internal/sessions/{quote(session_id, safe='')}/prompts"
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else httpx.Timeout(timeout_s)
        return await self.call(
            "GET", path, params=_caller(who) | {"status": status}, timeout=timeout,
            retry=timeout_s is None,
        )  # fmt: skip

    async def get_prompt(self, who: Principal, prompt_id: str) -> PromptView:
        """One prompt with its ``decisions``; 404 unknown or not the caller's."""
        view: PromptView = await self.call("GET", _prompt(prompt_id), params=_caller(who))
        return view

    async def decide(self, who: Principal, prompt_id: str, body: dict[str, Any]) -> Any:
        """Record a decision: ``{"prompt", "repeated", "remember_ignored"?}``; 409 for a
        different decision or a prompt that already ended; memory waits (up to 5 s) for a
        prompt it has not recorded yet. Idempotent, so sent again on a blip."""
        return await self.call(
            "POST", _prompt(prompt_id) + "/decision", params=_caller(who), json=body, resend=True
        )

    async def list_grants(self, who: Principal, filters: dict[str, Any]) -> Any:
        """The caller's grants."""
        return await self.call("GET", "/internal/grants", params=_caller(who) | filters)

    async def create_grant(self, who: Principal, body: dict[str, Any]) -> Any:
        """An explicit grant of the caller."""
        return await self.call("POST", "/internal/grants", params=_caller(who), json=body)

    async def revoke_grant(self, who: Principal, grant_id: str) -> None:
        """Revoke one of the caller's grants; 404 for another tenant's or user's."""
        path = f"/internal/grants/{quote(grant_id, safe='')}"
        await self.call("DELETE", path, params=_caller(who))


def _prompt(prompt_id: str) -> str:
    return f"/internal/prompts/{quote(prompt_id, safe='')}"


def _caller(who: Principal) -> dict[str, Any]:
    return {"tenant_id": who.tenant_id, "user_id": who.user_id}

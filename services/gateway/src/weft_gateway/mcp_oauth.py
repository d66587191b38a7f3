"""Where a user lands after authorising an MCP server (SPEC H-06, docs/mcp.md):
``GET /api/v1/mcp/oauth/callback``.

The browser arrives from the server's authorisation server with ``state`` and ``code`` (or
``error``), carrying no API key: the single-use ``state`` is what identifies the flow.
agent-config checks it (unknown, used or expired: 400), exchanges the code with the PKCE
verifier it kept, stores the user's token encrypted, and says which turn and call were
waiting. The gateway then answers that call's ``mcp_authorization`` prompt for the user
exactly as the user's own decision would (memory records it, ``ApprovalDecided`` goes on
``agent.control``): approve after a successful authorisation (the engine sends the call
again), deny when the user refused at the authorisation server.

The page shown is static text: nothing from the query is reflected.
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse
from weft_contracts.mcp import McpAuthorizationCallback, McpAuthorizationCompleted
from weft_platform.credentials import API_AUDIENCE, CredentialSigner
from weft_platform.internal_auth import outbound_credential

from weft_gateway.approvals_api import Approvals, DecisionBody
from weft_gateway.approvals_client import PromptView
from weft_gateway.auth import Principal
from weft_gateway.clients import ServiceClient

log = structlog.get_logger(__name__)

CALLBACK_PATH = "/api/v1/mcp/oauth/callback"
CALLBACK_SCOPE = "mcp:oauth-callback"
"""The scope of the gateway's service credential on agent-config's callback route."""
LOOKUP_POLL_S = 0.2


@dataclass(kw_only=True)
class McpCallback:
    """Completes an authorisation and answers the waiting prompt."""

    agent_config: ServiceClient
    approvals: Approvals
    signer: CredentialSigner | None
    lookup_wait_s: float = 5.0

    async def complete(
        self, state: str, code: str | None, error: str | None
    ) -> McpAuthorizationCompleted:
        """Exchange (agent-config), then decide the prompt of the waiting call."""
        if self.signer is None:
            raise HTTPException(503, "the gateway has no credential signer")
        outbound_credential.set(self.signer.service("agent-config", [CALLBACK_SCOPE]))
        body = McpAuthorizationCallback(state=state, code=code, error=error)
        done = McpAuthorizationCompleted.model_validate(
            await self.agent_config.call(
                "POST", "/internal/mcp/oauth/callback", json=body.model_dump(mode="json")
            )
        )
        who = Principal(tenant_id=done.tenant_id, user_id=done.user_id)
        outbound_credential.set(
            self.signer.request(
                tenant_id=who.tenant_id, user_id=who.user_id, audience=API_AUDIENCE, ttl_s=60
            )
        )
        prompt = await self._prompt_for(who, done)
        if prompt is None:  # the turn stopped waiting (timeout, cancel): the token is kept
            log.info("mcp_authorization_without_prompt", request_id=done.request_id,
                     call_id=done.call_id)  # fmt: skip
            return done
        decision = DecisionBody(
            decision="approve" if done.outcome == "authorized" else "deny",
            reason="" if done.outcome == "authorized" else "the user refused the authorisation",
        )
        try:
            await self.approvals.decide(who, str(prompt["prompt_id"]), decision)
        except HTTPException as exc:
            if exc.status_code != 409:  # 409: the prompt ended meanwhile (timeout, cancel)
                raise
        return done

    async def _prompt_for(
        self, who: Principal, done: McpAuthorizationCompleted
    ) -> PromptView | None:
        """The pending ``mcp_authorization`` prompt of the call; memory may record it a
        moment after the user saw it, so it is looked for up to ``lookup_wait_s``."""
        deadline = time.monotonic() + self.lookup_wait_s
        while True:
            listed = await self.approvals.memory.list_prompts(who, done.session_id, "pending")
            for prompt in listed.get("prompts", []):
                if prompt.get("call_id") == done.call_id and (
                    prompt.get("kind") == "mcp_authorization"
                ):
                    found: PromptView = prompt
                    return found
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(LOOKUP_POLL_S)


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title></head><body style="font-family: system-ui, sans-serif; margin: 3rem">
<h1>{title}</h1><p>{text}</p></body></html>"""


def _page(status: int, title: str, text: str) -> HTMLResponse:
    return HTMLResponse(
        PAGE.format(title=title, text=text),
        status_code=status,
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                 "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"},
    )  # fmt: skip


def mcp_oauth_router(callback: McpCallback) -> APIRouter:
    """``GET /api/v1/mcp/oauth/callback`` (no API key: the state is the proof)."""
    router = APIRouter(tags=["mcp"])

    @router.get(CALLBACK_PATH, response_class=HTMLResponse)
    async def oauth_callback(
        state: Annotated[str, Query(min_length=16, max_length=256)],
        code: Annotated[str | None, Query(min_length=1, max_length=4096)] = None,
        error: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    ) -> Any:
        """Complete an MCP server's authorisation and resume the waiting call."""
        if (code is None) == (error is None):
            return _page(400, "Authorisation failed", "The link is incomplete: it must carry "
                         "either a code or an error.")  # fmt: skip
        try:
            done = await callback.complete(state, code, error)
        except HTTPException as exc:
            if exc.status_code >= 500:
                return _page(503, "Try again", "The service is busy; reload this page in a "
                             "moment.")  # fmt: skip
            return _page(400, "Authorisation failed", "This authorisation link is unknown, "
                         "expired or was already used. Ask the agent again.")  # fmt: skip
        if done.outcome == "denied":
            return _page(200, "Authorisation refused", "The agent will go on without this "
                         "server. You can close this tab.")  # fmt: skip
        return _page(200, "Authorised", "The agent goes on with your request. You can close "
                     "this tab and return to the conversation.")  # fmt: skip

    return router

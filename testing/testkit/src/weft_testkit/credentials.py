"""Credentials for tests that talk to internal routes or write records themselves.

In a deployment only the gateway signs request credentials. Tests that stand in for the
gateway (a client of memory's routes, a record published by hand) sign the same tokens
with the development keys: :class:`DevCredentials` signs, :class:`TrustedTransport` adds
to each request without an ``Authorization`` header the credential the gateway would have
issued for the tenant and user that request names.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from weft_contracts import Envelope
from weft_platform.credentials import (
    GATEWAY,
    RECORDS,
    CredentialSigner,
    ensure_dev_keys,
    load_signer,
)
from weft_platform.runtime import DEV_ISSUERS

E = TypeVar("E", bound=Envelope)

EVERY_SERVICE = (
    "memory", "agent-config", "tool-exec", "suggestions", "sandbox", "knowledge", RECORDS,
)  # fmt: skip
OPERATOR_SCOPES = {
    "/internal/turns/unfinished": ("memory", "memory:turns.read"),
    "/internal/usage/documents": ("memory", "memory:usage.write"),  # before its prefix
    "/internal/usage": ("memory", "memory:usage.read"),
    "/internal/knowledge-bases/lookup": ("knowledge", "knowledge:bases.read"),
    "/internal/document-titles": ("knowledge", "knowledge:titles.read"),
    "/internal/organisations": ("agent-config", "agent-config:organisations"),
    "/internal/state": ("tool-exec", "tool-exec:state"),
    "/internal/suggestion-settings": ("agent-config", "agent-config:suggestion-settings"),
    "/internal/mcp/reencrypt": ("agent-config", "agent-config:mcp-reencrypt"),
}
"""System routes a test calls as the operator: audience and scope."""


def credentials_dir() -> Path:
    """The development key folder of this test run (``WEFT_CREDENTIALS_DIR`` or
    ``$WEFT_HOME/credentials``), with every development key pair in it."""
    explicit = os.environ.get("WEFT_CREDENTIALS_DIR")
    home = Path(os.environ.get("WEFT_HOME") or Path.cwd() / ".weft")
    directory = Path(explicit) if explicit else home / "credentials"
    ensure_dev_keys(directory, DEV_ISSUERS)
    return directory


@dataclass
class DevCredentials:
    """Signers of the gateway and the operator over one key folder."""

    gateway: CredentialSigner
    operator: CredentialSigner

    @classmethod
    def load(cls, directory: Path | None = None) -> DevCredentials:
        """Signers over ``directory`` (default :func:`credentials_dir`)."""
        folder = directory or credentials_dir()
        ensure_dev_keys(folder, DEV_ISSUERS)
        return cls(load_signer(folder, GATEWAY), load_signer(folder, "operator"))

    def request(
        self,
        tenant_id: str,
        user_id: str = "test-user",
        session_id: str | None = None,
        request_id: str | None = None,
        *,
        ttl_s: float = 600.0,
    ) -> str:
        """A request credential as the gateway issues it (every service's audience)."""
        return self.gateway.request(
            tenant_id=tenant_id,
            user_id=user_id,
            session_id=session_id,
            request_id=request_id,
            audience=EVERY_SERVICE,
            ttl_s=ttl_s,
        )

    def headers(self, tenant_id: str, user_id: str = "test-user", **kw: Any) -> dict[str, str]:
        """``Authorization`` for a request credential."""
        return {"Authorization": f"Bearer {self.request(tenant_id, user_id, **kw)}"}

    def operator_headers(self, audience: str, scope: str) -> dict[str, str]:
        """``Authorization`` for an operator service credential."""
        return {"Authorization": f"Bearer {self.operator.service(audience, [scope])}"}

    def for_request(self, request: httpx.Request) -> str:
        """The credential the gateway would give ``request``: operator for a system
        route, else a request credential for the tenant and user it names."""
        for prefix, (audience, scope) in OPERATOR_SCOPES.items():
            if request.url.path.startswith(prefix):
                return self.operator.service(audience, [scope])
        named = {**_body(request), **dict(request.url.params)}
        return self.request(
            str(named.get("tenant_id") or "no-tenant"), str(named.get("user_id") or "test-user")
        )


class TrustedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport: each request without ``Authorization`` gets the credential
    :meth:`DevCredentials.for_request` signs for it."""

    def __init__(self, inner: httpx.AsyncBaseTransport, credentials: DevCredentials | None = None):
        self._inner = inner
        self._credentials = credentials or DevCredentials.load()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Add the credential, then send through the wrapped transport."""
        if "authorization" not in request.headers:
            request.headers["Authorization"] = f"Bearer {self._credentials.for_request(request)}"
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._inner.aclose()


def trusted(app: Any, **kw: Any) -> TrustedTransport:
    """An in-process transport to ``app`` whose requests carry a credential."""
    return TrustedTransport(httpx.ASGITransport(app=app, **kw))


def _body(request: httpx.Request) -> dict[str, Any]:
    if "json" not in request.headers.get("content-type", ""):
        return {}
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def signed(credentials: DevCredentials, message: E, user_id: str = "test-user") -> E:
    """``message`` carrying the turn credential the gateway would have given its turn."""
    token = credentials.request(message.tenant_id, user_id, message.session_id, message.request_id)
    return message.model_copy(update={"credential": token})

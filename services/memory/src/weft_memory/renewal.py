"""The gateway's turn credential renewal, as memory's prompt timer calls it (SPEC H-03).

A prompt that expires may do so long after its turn's credential did: the engine must
continue the turn with a fresh credential, and only the gateway signs request
credentials. memory presents the turn's old credential to the gateway's
``POST /internal/turn-credentials/renew`` with its own service credential (issuer
``memory``, audience ``gateway``, scope ``credentials:renew``) and gets a new one with the
same claims.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from weft_platform.internal_auth import bearer
from weft_platform.tracing import service_client

RENEW_ROUTE = "/internal/turn-credentials/renew"
RENEW_SCOPE = "credentials:renew"


class RenewalUnavailable(Exception):
    """The gateway did not answer (down, timeout, 5xx): try again at the next tick."""


class RenewalRefused(Exception):
    """The gateway refused the old credential for good (4xx): its reason."""


class TurnCredentialRenewer:
    """Client of the gateway's renewal route."""

    def __init__(
        self,
        base_url: str,
        credential: Callable[[], str],
        timeout_s: float = 5.0,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """``transport``: tests serve the gateway's app in process."""
        self._credential = credential
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def renew(self, token: str) -> str:
        """A fresh credential for the turn of ``token``."""
        try:
            resp = await self._http.post(
                RENEW_ROUTE, json={"credential": token}, headers=bearer(self._credential())
            )
        except httpx.HTTPError as exc:
            raise RenewalUnavailable(f"gateway unreachable: {type(exc).__name__}") from None
        if resp.status_code >= 500 or resp.status_code == 429:
            raise RenewalUnavailable(f"gateway answered {resp.status_code}")
        if resp.status_code != 200:
            raise RenewalRefused(f"gateway answered {resp.status_code}: {resp.text[:300]}")
        try:
            fresh = resp.json()["credential"]
        except (ValueError, KeyError, TypeError):
            raise RenewalUnavailable("gateway answered without a credential") from None
        if not isinstance(fresh, str) or not fresh:
            raise RenewalUnavailable("gateway answered without a credential")
        return fresh

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

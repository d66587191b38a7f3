"""The operator credential of the admin API (``/admin/v1``), never a tenant key.

An operator presents ``Authorization: Bearer <token>``; the gateway knows only SHA-256
digests of the accepted tokens (``WEFT_ADMIN_TOKEN_SHA256``, comma-separated, so tokens
can be rotated with an overlap) and compares the presented token's digest with every one
of them in constant time. With no digest configured the admin API does not exist: every
admin route answers 404 and says why. A tenant's API key (or any other token) is 403.

Other admin routers reuse :func:`require_operator` as their dependency.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from fastapi import HTTPException, Request

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Operator:
    """Who called an admin route: ``operator:`` and the first 12 hex digits of the token's
    digest, which names the token in the audit log without revealing it."""

    id: str


class OperatorAuth:
    """Checks the operator token against the configured digests."""

    def __init__(self, digests: list[str]):
        self._digests = [bytes.fromhex(d) for d in digests]

    @classmethod
    def from_setting(cls, value: str) -> OperatorAuth:
        """Parse ``WEFT_ADMIN_TOKEN_SHA256`` (empty: admin API disabled); a malformed
        digest is refused at start rather than silently never matching."""
        digests = [d.strip().lower() for d in value.split(",") if d.strip()]
        bad = [d for d in digests if not _DIGEST.match(d)]
        if bad:
            raise ValueError("WEFT_ADMIN_TOKEN_SHA256: each entry must be 64 hex digits")
        return cls(digests)

    @property
    def enabled(self) -> bool:
        """Whether any operator token is configured."""
        return bool(self._digests)

    def authenticate(self, request: Request) -> Operator:
        """The operator behind ``request``; 404 disabled, 401 no token, 403 other token."""
        if not self._digests:
            raise HTTPException(
                404, "admin API disabled: no operator credential (WEFT_ADMIN_TOKEN_SHA256)"
            )
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            raise HTTPException(
                401,
                "missing operator token (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )
        presented = hashlib.sha256(auth[7:].strip().encode()).digest()
        matched = False
        for digest in self._digests:  # every digest, no early exit: constant time
            matched |= hmac.compare_digest(presented, digest)
        if not matched:
            raise HTTPException(403, "not an operator credential (tenant keys cannot administer)")
        return Operator(id=f"operator:{presented.hex()[:12]}")


def require_operator(request: Request) -> Operator:
    """FastAPI dependency of every admin route: the calling operator, or 404/401/403.
    The app's :class:`OperatorAuth` is ``app.state.operator_auth``."""
    auth: OperatorAuth | None = getattr(request.app.state, "operator_auth", None)
    if auth is None:
        raise HTTPException(404, "admin API disabled: no operator credential configured")
    return auth.authenticate(request)

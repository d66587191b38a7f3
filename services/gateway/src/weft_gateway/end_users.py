"""End users vouched for by their tenant's identity provider (a signed JWT).

A request with ``Authorization: Bearer <JWT>`` is read as follows: the token's ``iss``
names the tenant whose identity provider has that issuer (unknown issuer: 401); the
token must be signed by a key of that provider's JWK set with an algorithm the provider
allows (RS256, ES256 or EdDSA; never ``none`` nor an HMAC, whose "secret" would be the
public key); ``exp`` (required), ``nbf``, ``iss`` and ``aud`` are checked with a small
leeway; ``exp`` may be at most the maximum lifetime (the provider's
``max_token_lifetime_s``, else the gateway's, 24 h) after ``iat``, or after now for a token
without ``iat``: a stolen ten-year token is not a ten-year key; ``sub`` becomes the user id
inside that tenant. A token signed by another
tenant's provider but claiming this tenant's issuer fails its signature check.

JWK sets are fetched with httpx and cached (``jwks_cache_s``); a token whose ``kid`` is
not in the cached set fetches it again, at most once per ``jwks_min_refresh_s``, so key
rotation at the provider works and a stream of bogus ``kid`` values costs no fetch storm.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from fastapi import HTTPException

from weft_gateway.auth import Principal
from weft_gateway.tenant_registry import IdentityProvider, TenantRegistry

ACCEPTED_ALGORITHMS = frozenset({"RS256", "ES256", "EdDSA"})
MAX_JWKS_BYTES = 256 * 1024


def _unauthorized(reason: str) -> HTTPException:
    return HTTPException(401, f"invalid end-user token: {reason}", {"WWW-Authenticate": "Bearer"})


@dataclass
class _Jwks:
    keys: dict[str, jwt.PyJWK]
    fetched: float


@dataclass(frozen=True)
class _Issuer:
    tenant_id: str
    status: str
    provider: IdentityProvider
    inline_keys: dict[str, jwt.PyJWK] | None
    """An inline JWK set, parsed once per issuer lookup (parsing costs more than the
    signature check)."""


class EndUserAuth:
    """Verifies end-user JWTs against the tenants' identity providers."""

    def __init__(
        self,
        tenants: TenantRegistry,
        *,
        http: httpx.AsyncClient | None = None,
        issuer_cache_s: float = 30.0,
        jwks_cache_s: float = 300.0,
        jwks_min_refresh_s: float = 10.0,
        leeway_s: float = 30.0,
        max_lifetime_s: float = 24 * 3600,
    ):
        self._tenants = tenants
        self._http = http or httpx.AsyncClient(timeout=5.0, follow_redirects=False)
        self._issuer_cache_s = issuer_cache_s
        self._jwks_cache_s = jwks_cache_s
        self._min_refresh_s = jwks_min_refresh_s
        self._leeway_s = leeway_s
        self._max_lifetime_s = max_lifetime_s
        self._issuers: dict[str, tuple[float, _Issuer | None]] = {}
        self._jwks: dict[str, _Jwks] = {}
        self._fetch_lock = asyncio.Lock()
        # A burst of SSE connects presents one token many times: a verified token is
        # remembered (until its exp, at most ``issuer_cache_s``) with its issuer, whose
        # tenant and status are still looked up (cached) on every request.
        self._verified: dict[str, tuple[float, str, Principal]] = {}

    async def aclose(self) -> None:
        """Close the JWKS client."""
        await self._http.aclose()

    async def authenticate(self, token: str) -> tuple[Principal, str]:
        """The token's principal and its tenant's status; 401 with the reason otherwise."""
        remembered = self._verified.get(token)
        if remembered is not None and remembered[0] > time.time():
            found = await self._issuer(remembered[1])
            if found is not None and found.tenant_id == remembered[2].tenant_id:
                return remembered[2], found.status
        principal, status, issuer, expires = await self._verify_token(token)
        if len(self._verified) >= 10_000:
            self._verified.clear()
        until = min(expires, time.time() + self._issuer_cache_s)
        self._verified[token] = (until, issuer, principal)
        return principal, status

    async def _verify_token(self, token: str) -> tuple[Principal, str, str, float]:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError as exc:
            raise _unauthorized("malformed token") from exc
        alg = header.get("alg")
        if alg not in ACCEPTED_ALGORITHMS:
            raise _unauthorized(f"algorithm {alg!r} not accepted (RS256, ES256, EdDSA)")
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or not issuer:
            raise _unauthorized("no issuer (iss)")
        found = await self._issuer(issuer)
        if found is None:
            raise _unauthorized("unknown issuer")
        provider = found.provider
        if alg not in provider.algorithms:
            raise _unauthorized(f"algorithm {alg!r} not allowed by this identity provider")
        key = await self._signing_key(found, header.get("kid"))
        verified = self._verify(token, key, alg, provider)
        self._check_lifetime(verified, provider)
        subject = verified.get("sub")
        if not isinstance(subject, str) or not 1 <= len(subject) <= 128:
            raise _unauthorized("subject (sub) must be a string of 1 to 128 characters")
        principal = Principal(tenant_id=found.tenant_id, user_id=subject)
        return principal, found.status, issuer, float(verified["exp"])

    def _check_lifetime(self, claims: dict[str, Any], provider: IdentityProvider) -> None:
        """401 when ``exp`` lies further than the maximum lifetime after ``iat`` (after now
        without ``iat``): the limit is the provider's, else the gateway's."""
        limit = provider.max_token_lifetime_s or self._max_lifetime_s
        issued = claims.get("iat")
        start = float(issued) if isinstance(issued, int | float) else time.time()
        lifetime = float(claims["exp"]) - start
        if lifetime > limit + self._leeway_s:
            since = "its iat" if isinstance(issued, int | float) else "now (no iat)"
            raise _unauthorized(
                f"lifetime too long: exp is {lifetime:.0f} s after {since}, "
                f"at most {limit:.0f} s is accepted"
            )

    def _verify(
        self, token: str, key: jwt.PyJWK, alg: str, provider: IdentityProvider
    ) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=provider.audience,
                issuer=provider.issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _unauthorized("expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise _unauthorized("not valid yet (nbf/iat)") from exc
        except jwt.InvalidAudienceError as exc:
            raise _unauthorized("wrong audience") from exc
        except jwt.InvalidSignatureError as exc:
            raise _unauthorized("bad signature") from exc
        except jwt.InvalidTokenError as exc:
            raise _unauthorized(str(exc) or type(exc).__name__) from exc

    async def _issuer(self, issuer: str) -> _Issuer | None:
        now = time.monotonic()
        cached = self._issuers.get(issuer)
        if cached is not None and cached[0] > now:
            return cached[1]
        row = await self._tenants.by_issuer(issuer)
        found = None
        if row is not None:
            tenant_id, status, provider = row
            inline = _parse_jwks(provider.jwks) if provider.jwks is not None else None
            found = _Issuer(tenant_id, status, provider, inline)
        if len(self._issuers) >= 10_000:
            self._issuers.clear()  # bounded against a stream of made-up issuers
        self._issuers[issuer] = (now + self._issuer_cache_s, found)
        return found

    async def _signing_key(self, found: _Issuer, kid: object) -> jwt.PyJWK:
        provider = found.provider
        if found.inline_keys is not None:
            return _pick(found.inline_keys, kid)
        cache_key = f"{found.tenant_id}\n{provider.jwks_url}"
        now = time.monotonic()
        cached = self._jwks.get(cache_key)
        fresh = cached is not None and now - cached.fetched < self._jwks_cache_s
        if cached is not None and fresh and (_has(cached.keys, kid)):
            return _pick(cached.keys, kid)
        if cached is None or not fresh or now - cached.fetched >= self._min_refresh_s:
            cached = await self._fetch(cache_key, str(provider.jwks_url))
        return _pick(cached.keys, kid)

    async def _fetch(self, cache_key: str, url: str) -> _Jwks:
        async with self._fetch_lock:
            try:
                resp = await self._http.get(url)
                resp.raise_for_status()
                if len(resp.content) > MAX_JWKS_BYTES:
                    raise ValueError("JWK set too large")
                keys = _parse_jwks(resp.json())
            except (httpx.HTTPError, ValueError) as exc:
                raise HTTPException(
                    503, "identity provider keys unavailable", {"Retry-After": "5"}
                ) from exc
            entry = _Jwks(keys, time.monotonic())
            self._jwks[cache_key] = entry
            return entry


def _parse_jwks(data: Any) -> dict[str, jwt.PyJWK]:
    """Usable keys of a JWK set by ``kid`` (``""`` for a key without one); keys of other
    kinds (symmetric, encryption-only) are skipped."""
    keys: dict[str, jwt.PyJWK] = {}
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JWK set")
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") == "oct" or entry.get("use") == "enc":
            continue
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWKError:
            continue
        if key.algorithm_name in ACCEPTED_ALGORITHMS:
            keys[str(entry.get("kid", ""))] = key
    return keys


def _has(keys: dict[str, jwt.PyJWK], kid: object) -> bool:
    return (isinstance(kid, str) and kid in keys) or (kid is None and len(keys) == 1)


def _pick(keys: dict[str, jwt.PyJWK], kid: object) -> jwt.PyJWK:
    if isinstance(kid, str) and kid in keys:
        return keys[kid]
    if kid is None and len(keys) == 1:
        return next(iter(keys.values()))
    raise _unauthorized("signing key not found in the identity provider's key set")

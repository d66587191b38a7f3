"""Service credentials: signed tokens that say whom a piece of internal work is for.

Two kinds, both JWTs signed with Ed25519 (``EdDSA``) so that a service that can verify a
token cannot mint one (ARCHITECTURE invariant 5, "no internal route trusts a ``tenant_id``
it is merely told"):

- a **request credential**, signed by the gateway only, for each request it accepts: the
  tenant, the user, for a turn the session and request id, the audience (the services that
  may act on it) and a short life. The engine and tool workers forward it on their internal
  calls and in the Kafka records of the turn; they never sign one.
- a **service credential**, signed by one service with its own key, for system work that
  has no request (the engine's turn auditor): it names exact scopes (``memory:turns.read``)
  and never carries a tenant, so it opens no tenant route and a request credential opens
  no system route.

Keys live in ``credentials_dir`` as ``<issuer>.<kid>.key`` (PKCS#8 PEM, only on the issuer)
and ``<issuer>.<kid>.pub`` (verifiers). A signer uses its issuer's newest kid (the largest
in sort order); verifiers accept every ``.pub`` present, so a rollover adds a new pair,
waits for every verifier to hold it, moves signers over, then removes the old ``.pub``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from jwt.types import Options

ALGORITHM = "EdDSA"
GATEWAY = "gateway"
"""The only issuer of request credentials."""
RECORDS = "kafka"
"""Audience of a request credential that may ride on Kafka records (a turn's)."""
API_AUDIENCE = ("memory", "agent-config", "suggestions", "sandbox", "knowledge")
"""Services a plain API request (sessions, agents, knowledge bases) reaches."""
TURN_AUDIENCE = ("memory", "agent-config", "tool-exec", "knowledge", RECORDS)
"""Services a turn's work reaches: the engine and tool workers call memory with it, the
knowledge tools call knowledge."""
LEEWAY_S = 30.0
"""Clock skew tolerated between the signer's and a verifier's clock."""

VERIFIED_CACHE = 10_000
"""Tokens whose signature a verifier remembers (about 4 MB at most)."""

Kind = Literal["request", "service"]


class CredentialRejected(Exception):
    """A token that does not open what it was presented for; ``status`` is the HTTP answer
    (401: missing, malformed, expired, unknown key, wrong audience or kind; 403: valid but
    for another tenant, user, session or scope)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class MissingKeys(RuntimeError):
    """No key where one is required, outside development (fail closed at start)."""


@dataclass(frozen=True, kw_only=True)
class RequestCredential:
    """What a verified request credential says."""

    tenant_id: str
    user_id: str
    session_id: str | None
    request_id: str | None
    knowledge_base_ids: tuple[str, ...] | None = None
    """The key's knowledge bases (SPEC A-09, claim ``kbs``); None: every KB of the tenant.
    A service that resolves or writes knowledge scope takes it from here, not from what
    the request says."""
    audience: tuple[str, ...]
    issued_at: float
    expires_at: float
    scopes: frozenset[str] = frozenset()
    """Extra rights of the caller's key (claim ``scp``), e.g. ``approvals:decide``."""


@dataclass(frozen=True, kw_only=True)
class ServiceCredential:
    """What a verified service credential says."""

    issuer: str
    scopes: frozenset[str]
    audience: tuple[str, ...]


@dataclass(frozen=True)
class _Key:
    issuer: str
    kid: str
    public: Ed25519PublicKey


class CredentialVerifier:
    """Verifies tokens against every public key in the key set (both keys of a rollover)."""

    def __init__(self, keys: Iterable[_Key]):
        self._keys = {f"{k.issuer}.{k.kid}": k for k in keys}
        self._verified: dict[str, dict[str, Any]] = {}

    @property
    def key_ids(self) -> frozenset[str]:
        """``<issuer>.<kid>`` of every key this verifier accepts."""
        return frozenset(self._keys)

    def verify_request(
        self, token: str, audience: str, *, at: float | None = None
    ) -> RequestCredential:
        """The request credential in ``token`` for ``audience``; ``at`` checks its life at
        another time than now (a record's production time)."""
        claims = self._decode(token, audience, "request", at)
        if claims["iss"] != GATEWAY:
            raise CredentialRejected(401, "request credential not signed by the gateway")
        tenant, user = claims.get("ten"), claims.get("sub")
        if not isinstance(tenant, str) or not tenant or not isinstance(user, str) or not user:
            raise CredentialRejected(401, "request credential without tenant or user")
        return RequestCredential(
            tenant_id=tenant,
            user_id=user,
            session_id=_optional_str(claims.get("ses")),
            request_id=_optional_str(claims.get("req")),
            knowledge_base_ids=_knowledge_bases(claims),
            audience=_audience(claims),
            issued_at=float(claims["iat"]),
            expires_at=float(claims["exp"]),
            scopes=_scopes(claims),
        )

    def verify_service(
        self,
        token: str,
        audience: str,
        scope: str,
        *,
        issuers: frozenset[str] | None = None,
        at: float | None = None,
    ) -> ServiceCredential:
        """The service credential in ``token``; 403 unless it names ``scope`` and (with
        ``issuers``) was signed by one of them."""
        claims = self._decode(token, audience, "service", at)
        if issuers is not None and claims["iss"] not in issuers:
            raise CredentialRejected(403, f"{claims['iss']!r} may not call this route")
        scopes = claims.get("scope")
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise CredentialRejected(401, "service credential without scopes")
        if scope not in scopes:
            raise CredentialRejected(403, f"service credential does not grant {scope!r}")
        return ServiceCredential(
            issuer=str(claims["iss"]), scopes=frozenset(scopes), audience=_audience(claims)
        )

    def kind(self, token: str) -> str | None:
        """The unverified ``typ`` claim (which check applies); None when unreadable."""
        cached = self._verified.get(token)
        if cached is not None:
            return str(cached["typ"])
        try:
            value = jwt.decode(token, options={"verify_signature": False}).get("typ")
        except jwt.PyJWTError:
            return None
        return value if isinstance(value, str) else None

    def _decode(self, token: str, audience: str, kind: Kind, at: float | None) -> dict[str, Any]:
        """The claims of ``token`` once its signature, audience, life (at ``at``, default
        now) and kind are checked."""
        claims = self._signed(token)
        if audience not in _audience(claims):
            raise CredentialRejected(401, f"credential not meant for {audience!r}")
        when = time.time() if at is None else at
        if not claims["iat"] - LEEWAY_S <= when <= claims["exp"] + LEEWAY_S:
            late = when > claims["exp"] + LEEWAY_S
            reason = "credential expired" if late else "credential not valid yet"
            raise CredentialRejected(
                401, reason if at is None else "credential was not valid at that time"
            )
        if claims["typ"] != kind:
            raise CredentialRejected(401, f"a {claims['typ']} credential where a {kind} is due")
        return claims

    def _signed(self, token: str) -> dict[str, Any]:
        """The claims of a token whose signature and issuer are good. Cached per token
        (bounded): a turn presents one token on every call and record it makes, and the
        signature is most of the cost; life and audience are checked on every use."""
        cached = self._verified.get(token)
        if cached is not None:
            return cached
        key = self._key_of(token)
        options: Options = {
            "require": ["exp", "iat", "iss", "aud", "typ"],
            "verify_exp": False,
            "verify_iat": False,
            "verify_aud": False,
        }
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public,
                algorithms=[ALGORITHM],
                issuer=key.issuer,  # a key signs only for its own issuer
                options=options,
            )
        except jwt.PyJWTError as exc:
            raise CredentialRejected(401, f"invalid credential: {exc}") from None
        if not all(isinstance(claims[c], int | float) for c in ("exp", "iat")):
            raise CredentialRejected(401, "invalid credential: exp and iat must be numbers")
        if len(self._verified) >= VERIFIED_CACHE:
            self._verified.clear()  # bounded; a token is cheap to verify again
        self._verified[token] = claims
        return claims

    def _key_of(self, token: str) -> _Key:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            raise CredentialRejected(401, "malformed credential") from None
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise CredentialRejected(401, f"credential signed with an unknown key {kid!r}")
        return key


class CredentialSigner:
    """Signs tokens with one issuer's newest private key."""

    def __init__(self, issuer: str, kid: str, private: Ed25519PrivateKey):
        self.issuer = issuer
        self.kid = kid
        self._private = private
        self._service_cache: dict[tuple[str, tuple[str, ...]], tuple[float, str]] = {}

    def request(
        self,
        *,
        tenant_id: str,
        user_id: str,
        audience: Iterable[str],
        ttl_s: float,
        session_id: str | None = None,
        request_id: str | None = None,
        issued_at: float | None = None,
        knowledge_base_ids: Iterable[str] | None = None,
        scopes: Iterable[str] = (),
    ) -> str:
        """A request credential (the gateway only); ``issued_at`` defaults to now;
        ``knowledge_base_ids``: the key's KB restriction (None: none); ``scopes``: the
        key's extra rights."""
        if self.issuer != GATEWAY:
            raise ValueError("only the gateway signs request credentials")
        claims: dict[str, Any] = {"typ": "request", "ten": tenant_id, "sub": user_id}
        if session_id is not None:
            claims["ses"] = session_id
        if request_id is not None:
            claims["req"] = request_id
        if knowledge_base_ids is not None:
            claims["kbs"] = sorted(knowledge_base_ids)
        if scopes:
            claims["scp"] = sorted(set(scopes))
        return self._sign(claims, audience, ttl_s, issued_at)

    def service(
        self,
        audience: str,
        scopes: Iterable[str],
        ttl_s: float = 300.0,
        *,
        issued_at: float | None = None,
    ) -> str:
        """A service credential for ``audience``; reused until half its life is gone
        (``issued_at``: a fresh one issued then, never cached)."""
        wanted = (audience, tuple(sorted(scopes)))
        if issued_at is not None:
            claims = {"typ": "service", "scope": list(wanted[1])}
            return self._sign(claims, [audience], ttl_s, issued_at)
        now = time.time()
        cached = self._service_cache.get(wanted)
        if cached is not None and cached[0] > now:
            return cached[1]
        token = self._sign({"typ": "service", "scope": list(wanted[1])}, [audience], ttl_s)
        self._service_cache[wanted] = (now + ttl_s / 2, token)
        return token

    def _sign(
        self,
        claims: dict[str, Any],
        audience: Iterable[str],
        ttl_s: float,
        issued_at: float | None = None,
    ) -> str:
        now = int(time.time() if issued_at is None else issued_at)
        payload = {**claims, "iss": self.issuer, "aud": list(audience), "iat": now}
        payload["exp"] = now + max(1, int(ttl_s))
        return jwt.encode(
            payload,
            self._private,
            algorithm=ALGORITHM,
            headers={"kid": f"{self.issuer}.{self.kid}"},
        )


def outlived(token: str | None, within_s: float = 0.0) -> bool:
    """Whether ``token`` is expired, or expires within ``within_s`` (its unverified
    ``exp``: a holder deciding whether to present it, not a verifier); a token without a
    readable ``exp`` counts as outlived."""
    if not token:
        return True
    try:
        expires = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return True
    return not isinstance(expires, int | float) or expires <= time.time() + within_s


def load_verifier(directory: Path) -> CredentialVerifier:
    """Every ``<issuer>.<kid>.pub`` in ``directory``; :class:`MissingKeys` when the
    gateway has none (no request could ever be verified)."""
    keys = []
    for path in sorted(directory.glob("*.pub")) if directory.is_dir() else []:
        issuer, kid = _names(path, ".pub")
        public = serialization.load_pem_public_key(path.read_bytes())
        if not isinstance(public, Ed25519PublicKey):
            raise MissingKeys(f"{path} is not an Ed25519 public key")
        keys.append(_Key(issuer, kid, public))
    if not any(k.issuer == GATEWAY for k in keys):
        raise MissingKeys(f"no gateway public key ({GATEWAY}.<kid>.pub) in {directory}")
    return CredentialVerifier(keys)


def load_signer(directory: Path, issuer: str) -> CredentialSigner:
    """The newest ``<issuer>.<kid>.key`` in ``directory``; :class:`MissingKeys` if none."""
    found = sorted(directory.glob(f"{issuer}.*.key")) if directory.is_dir() else []
    if not found:
        raise MissingKeys(f"no private key {issuer}.<kid>.key in {directory}")
    _, kid = _names(found[-1], ".key")
    private = serialization.load_pem_private_key(found[-1].read_bytes(), password=None)
    if not isinstance(private, Ed25519PrivateKey):
        raise MissingKeys(f"{found[-1]} is not an Ed25519 private key")
    return CredentialSigner(issuer, kid, private)


def ensure_dev_keys(directory: Path, issuers: Iterable[str], kid: str = "dev1") -> None:
    """Create a key pair for each issuer that has none (development and tests only).

    Processes starting together may race: each pair is written to a temporary file and
    linked into place, so exactly one private key wins and its public key follows it.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for issuer in issuers:
        if not any(directory.glob(f"{issuer}.*.key")):
            _write_once(directory / f"{issuer}.{kid}.key", _new_private_pem())
        for key_path in directory.glob(f"{issuer}.*.key"):
            public_path = key_path.with_suffix(".pub")
            if not public_path.exists():
                private = serialization.load_pem_private_key(key_path.read_bytes(), None)
                _write_once(public_path, _public_pem(private))


def new_key_pair(directory: Path, issuer: str, kid: str) -> tuple[Path, Path]:
    """Write a fresh ``<issuer>.<kid>.key`` / ``.pub`` (a rollover's new key); refuses
    to replace an existing pair."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = directory / f"{issuer}.{kid}.key"
    if key_path.exists() or key_path.with_suffix(".pub").exists():
        raise FileExistsError(f"{issuer}.{kid} already exists in {directory}")
    pem = _new_private_pem()
    _write_once(key_path, pem)
    public_path = key_path.with_suffix(".pub")
    _write_once(public_path, _public_pem(serialization.load_pem_private_key(pem, None)))
    return key_path, public_path


def _new_private_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public_pem(private: Any) -> bytes:
    public: bytes = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public


def _write_once(path: Path, content: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _names(path: Path, suffix: str) -> tuple[str, str]:
    issuer, _, kid = path.name.removesuffix(suffix).partition(".")
    if not issuer or not kid:
        raise MissingKeys(f"key file {path.name!r} is not named <issuer>.<kid>{suffix}")
    return issuer, kid


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _knowledge_bases(claims: dict[str, Any]) -> tuple[str, ...] | None:
    if "kbs" not in claims:
        return None
    kbs = claims["kbs"]
    if not isinstance(kbs, list) or not all(isinstance(kb, str) for kb in kbs):
        raise CredentialRejected(401, "request credential with malformed knowledge bases")
    return tuple(kbs)


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    value = claims.get("scp")
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise CredentialRejected(401, "malformed scopes claim")
    return frozenset(value)


def _audience(claims: dict[str, Any]) -> tuple[str, ...]:
    aud = claims.get("aud")
    return (aud,) if isinstance(aud, str) else tuple(aud or ())


def main(argv: list[str] | None = None) -> None:
    """``python -m weft_platform.credentials new-pair DIR ISSUER KID``: write a key pair
    (a deployment's keys, or a rollover's new one)."""
    parser = argparse.ArgumentParser(prog="python -m weft_platform.credentials")
    commands = parser.add_subparsers(dest="command", required=True)
    pair = commands.add_parser("new-pair", help="write <issuer>.<kid>.key and .pub")
    pair.add_argument("directory", type=Path)
    pair.add_argument("issuer", help="gateway, engine or operator")
    pair.add_argument("kid", help="key id; later keys sort after earlier ones (a date)")
    args = parser.parse_args(argv)
    for path in new_key_pair(args.directory, args.issuer, args.kid):
        print(path)


if __name__ == "__main__":
    main()

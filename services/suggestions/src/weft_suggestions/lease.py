"""The generation lease of a suggestion set (SPEC Q-04): one SQL statement decides which
replica generates a set, so replicas never generate it twice, and a crashed generator's
set is taken over once its lease has passed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import String, bindparam, column, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import StarterConfig

from weft_suggestions.config import FollowUpConfig

FinalState = Literal["ready", "suppressed", "failed"]
"""How a set ends (SPEC Q-04)."""

FINAL_STATES: tuple[FinalState, ...] = ("ready", "suppressed", "failed")


@dataclass(frozen=True, kw_only=True)
class SetKey:
    """The cache key of a set (SPEC Q-04), within its tenant."""

    tenant_id: str
    assistant_message_id: str
    placement: str
    config_hash: str
    locale: str

    def params(self) -> dict[str, str]:
        """The key as SQL parameters."""
        return {
            "tenant_id": self.tenant_id,
            "assistant_message_id": self.assistant_message_id,
            "placement": self.placement,
            "config_hash": self.config_hash,
            "locale": self.locale,
        }


@dataclass(frozen=True, kw_only=True)
class Claim:
    """This replica holds the set's lease until ``lease_until``; ``owner`` proves it."""

    key: SetKey
    owner: str
    session_id: str
    request_id: str
    lease_until: datetime


@dataclass(frozen=True, kw_only=True)
class ExpiredSet:
    """A set still generating past its lease, with what claiming it again needs."""

    key: SetKey
    session_id: str
    request_id: str
    config: FollowUpConfig


_KEY_MATCH = """
    tenant_id = :tenant_id AND assistant_message_id = :assistant_message_id
    AND placement = :placement AND config_hash = :config_hash AND locale = :locale
"""

# A new set is inserted as generating. An existing one is taken only when its generator's
# lease has passed (it crashed or stalled), or, for a regeneration, when it is finished.
# A live lease or (without ``regenerate``) a finished set leaves the row as it is and
# returns nothing: the caller does not generate.
_CLAIM = text(f"""
INSERT INTO message_suggestion_sets AS s
    (tenant_id, assistant_message_id, placement, config_hash, locale, session_id,
     request_id, config, state, owner, lease_until, generations)
VALUES
    (:tenant_id, :assistant_message_id, :placement, :config_hash, :locale, :session_id,
     :request_id, :config, 'generating', :owner,
     now() + make_interval(secs => :lease_s), 1)
ON CONFLICT (tenant_id, assistant_message_id, placement, config_hash, locale) DO UPDATE
SET state = 'generating', owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until,
    generations = s.generations + 1, updated_at = now()
WHERE (s.state = 'generating' AND s.lease_until < now())
   OR (CAST(:regenerate AS boolean) AND s.state IN {FINAL_STATES})
RETURNING lease_until
""").bindparams(bindparam("config", type_=JSONB))

_RENEW = text(f"""
UPDATE message_suggestion_sets
SET lease_until = now() + make_interval(secs => :lease_s), updated_at = now()
WHERE {_KEY_MATCH} AND state = 'generating' AND owner = :owner
RETURNING lease_until
""")

_FINISH = text(f"""
UPDATE message_suggestion_sets
SET state = :state, questions = :questions, reason = :reason, owner = NULL,
    lease_until = NULL, updated_at = now()
WHERE {_KEY_MATCH} AND state = 'generating' AND owner = :owner
""").bindparams(bindparam("questions", type_=JSONB))

_EXPIRED = text("""
SELECT tenant_id, assistant_message_id, placement, config_hash, locale, session_id,
       request_id, config
FROM message_suggestion_sets
WHERE state = 'generating' AND lease_until < now() AND placement = 'follow_up'
ORDER BY lease_until
LIMIT :limit
""").columns(
    column("tenant_id", String),
    column("assistant_message_id", String),
    column("placement", String),
    column("config_hash", String),
    column("locale", String),
    column("session_id", String),
    column("request_id", String),
    column("config", JSONB),
)


class SuggestionLease:
    """Claims, renews and finishes suggestion sets in PostgreSQL."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], lease_s: float):
        self._sessions = sessions
        self._lease_s = lease_s

    async def claim(
        self,
        key: SetKey,
        *,
        session_id: str,
        request_id: str,
        config: FollowUpConfig | StarterConfig,
        regenerate: bool = False,
    ) -> Claim | None:
        """The claim on ``key`` if this replica is now its generator; None when another
        holds a live lease or the set is already finished (unless ``regenerate``)."""
        owner = uuid.uuid4().hex
        params: dict[str, Any] = {
            **key.params(),
            "session_id": session_id,
            "request_id": request_id,
            "config": config.model_dump(mode="json"),
            "owner": owner,
            "lease_s": self._lease_s,
            "regenerate": regenerate,
        }
        async with self._sessions.begin() as s:
            lease_until = (await s.execute(_CLAIM, params)).scalar_one_or_none()
        if lease_until is None:
            return None
        return Claim(
            key=key,
            owner=owner,
            session_id=session_id,
            request_id=request_id,
            lease_until=lease_until,
        )

    async def renew(self, claim: Claim) -> bool:
        """Extend the lease; False when it was lost (expired and taken over)."""
        params = {**claim.key.params(), "owner": claim.owner, "lease_s": self._lease_s}
        async with self._sessions.begin() as s:
            return (await s.execute(_RENEW, params)).scalar_one_or_none() is not None

    async def finish(
        self, claim: Claim, state: FinalState, questions: list[dict[str, Any]], reason: str = ""
    ) -> bool:
        """Store the outcome; False (nothing stored) when the lease was lost meanwhile:
        the replica that took the set over stores and announces its own outcome."""
        if state not in FINAL_STATES:
            raise ValueError(f"not a final state: {state}")
        params = {
            **claim.key.params(),
            "owner": claim.owner,
            "state": state,
            "questions": questions,
            "reason": reason[:200],
        }
        async with self._sessions.begin() as s:
            result = await s.execute(_FINISH, params)
        return bool(getattr(result, "rowcount", 0))

    async def expired(self, limit: int = 20) -> list[ExpiredSet]:
        """Sets whose generator's lease has passed (a crashed or stalled replica)."""
        async with self._sessions() as s:
            rows = (await s.execute(_EXPIRED, {"limit": limit})).all()
        return [
            ExpiredSet(
                key=SetKey(
                    tenant_id=r.tenant_id,
                    assistant_message_id=r.assistant_message_id,
                    placement=r.placement,
                    config_hash=r.config_hash,
                    locale=r.locale,
                ),
                session_id=r.session_id,
                request_id=r.request_id,
                config=FollowUpConfig.model_validate(r.config),
            )
            for r in rows
        ]

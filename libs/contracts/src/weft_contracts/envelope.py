"""The envelope every Kafka message of Weft carries (ARCHITECTURE "Topics")."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field
from ulid import ULID

SCHEMA_VERSION = 1
"""Version of the envelope and payload shapes; bumped on a breaking change."""


def new_event_id() -> str:
    """A unique id that sorts by creation time (a ULID, 26 Crockford base32 characters)."""
    return str(ULID())


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


class Payload(BaseModel):
    """Base of every ``data`` model: immutable, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Envelope(BaseModel):
    """Fields shared by every message; subclasses add a literal ``type`` and a ``data`` model.

    ``seq`` is strictly increasing within one turn (``request_id``) on ``agent.events``;
    commands and tool messages carry 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=new_event_id, description="Unique, time-sortable id (ULID).")
    schema_version: int = Field(default=SCHEMA_VERSION, ge=1)
    tenant_id: str = Field(min_length=1, max_length=128)
    session_id: str = Field(min_length=1, max_length=128)
    request_id: str = Field(min_length=1, max_length=128, description="The turn this belongs to.")
    seq: int = Field(default=0, ge=0, description="Per-turn sequence number of agent events.")
    time: datetime = Field(default_factory=utc_now)
    traceparent: str | None = Field(default=None, description="W3C trace context header.")
    credential: str | None = Field(
        default=None,
        max_length=4096,
        description="The turn's request credential (a JWT the gateway signed), or a service "
        "credential for system work; consumers dead-letter a record whose credential is "
        "missing or names another tenant or session.",
    )

    def key(self) -> bytes:
        """The Kafka record key: the session, so a session's messages share one partition."""
        return self.session_id.encode()

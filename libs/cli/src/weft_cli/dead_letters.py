"""Dead letters as ``weft dlq`` reads them, and the rule that says whether one can go back.

A dead letter (``weft_contracts.DeadLetter``, written by ``weft_platform.bus``) keeps the
bad record's value as text in ``data.raw``. Replaying it publishes that text unchanged on
the topic it came from: the same envelope id, time and credential, so the consumer checks
the credential against the record's own time and de-duplicates it by id like any
redelivery (ARCHITECTURE invariant 3). What the consumer would only dead-letter again, or
what a forged letter would smuggle in, is refused here with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError
from weft_contracts import DeadLetter, Envelope, Topic, UnsupportedSchemaVersion
from weft_contracts.compat import read_json
from weft_contracts.topics import TOPIC_MODELS
from weft_platform.kafka_acls import ACCESS, DLQ_REPLAY

RAW_LIMIT = 100_000
"""The bus keeps this many characters of a record in its dead letter: one that long may
have been cut."""
REPLAYABLE = frozenset(Topic(t) for t in ACCESS[DLQ_REPLAY].writes)
"""The topics ``weft-dlq-replay`` may write: never ``agent.events`` (only the engine writes
a turn's events, it owns their ``seq``) nor ``session.notices`` or the DLQ itself."""
REPLAYED_HEADER = "weft-replayed-from"
_LETTER: TypeAdapter[DeadLetter] = TypeAdapter(DeadLetter)


class NotReplayable(ValueError):
    """Why a dead letter cannot be put back (the message is for people)."""


@dataclass(frozen=True, slots=True)
class StoredLetter:
    """One record of the DLQ topic: its position, and the dead letter it holds (None when
    the record is not a readable dead letter; ``problem`` says why)."""

    partition: int
    offset: int
    timestamp_ms: int
    letter: DeadLetter | None
    problem: str | None = None

    @property
    def id(self) -> str:
        """The dead letter's envelope id, or ``partition:offset`` for an unreadable one."""
        return self.letter.id if self.letter is not None else self.position

    @property
    def position(self) -> str:
        """``partition:offset`` in the DLQ topic."""
        return f"{self.partition}:{self.offset}"

    def matches(self, wanted: str) -> bool:
        """Whether ``wanted`` names this record (its id or its position)."""
        return wanted in (self.id, self.position)


@dataclass(frozen=True, slots=True)
class Replay:
    """What goes back on ``topic``: the record's original bytes, key and type."""

    topic: Topic
    key: bytes
    value: bytes
    type: str
    envelope_id: str


def read_letter(
    partition: int, offset: int, timestamp_ms: int, value: bytes | None
) -> StoredLetter:
    """Decode one DLQ record; an unreadable one is kept with the reason, never dropped."""
    if value is None:
        return StoredLetter(partition, offset, timestamp_ms, None, "empty record (no value)")
    try:
        letter = read_json(_LETTER, value)
    except (ValidationError, UnsupportedSchemaVersion, UnicodeDecodeError) as exc:
        return StoredLetter(
            partition, offset, timestamp_ms, None, f"not a dead letter: {_first(exc)}"
        )
    return StoredLetter(partition, offset, timestamp_ms, letter)


def replay_of(stored: StoredLetter) -> Replay:
    """The record to publish again for ``stored``, or :class:`NotReplayable`."""
    letter = stored.letter
    if letter is None:
        raise NotReplayable(f"record {stored.position} {stored.problem}")
    data = letter.data
    topic = _source(data.source_topic)
    raw = data.raw
    if len(raw) >= RAW_LIMIT:
        raise NotReplayable(
            f"the record was {len(raw):,} characters or more: the dead letter keeps only the "
            f"first {RAW_LIMIT:,}, so it cannot be replayed whole"
        )
    if "\ufffd" in raw:
        raise NotReplayable(
            "the record was not valid UTF-8: its bytes were replaced when it was dead-lettered"
        )
    envelope = _decoded(topic, raw)
    if not envelope.credential:
        raise NotReplayable("the record has no credential: its consumer would refuse it again")
    if letter.tenant_id not in ("unknown", envelope.tenant_id):
        raise NotReplayable(
            f"the dead letter names tenant {letter.tenant_id!r} but its record is of "
            f"{envelope.tenant_id!r}: forged or damaged"
        )
    key = _key(data.key, envelope)
    return Replay(topic, key, raw.encode(), str(getattr(envelope, "type", "")), envelope.id)


def summary(stored: StoredLetter) -> dict[str, Any]:
    """One line of ``weft dlq ls`` (also its JSON): where, when, from where, why, and
    whether it can be replayed."""
    row: dict[str, Any] = {
        "id": stored.id,
        "position": stored.position,
        "dead_lettered_at": datetime.fromtimestamp(stored.timestamp_ms / 1000, UTC).isoformat(),
    }
    try:
        replay_of(stored)
        refusal = None
    except NotReplayable as exc:
        refusal = str(exc)
    letter = stored.letter
    if letter is None:
        unread = {"source_topic": None, "consumer_group": None, "tenant_id": None}
        return row | unread | {"session_id": None, "reason": stored.problem,
                               "replayable": False, "refusal": refusal}  # fmt: skip
    return row | {
        "source_topic": letter.data.source_topic,
        "consumer_group": letter.data.consumer_group,
        "reason": letter.data.reason,
        "tenant_id": letter.tenant_id,
        "session_id": letter.session_id,
        "replayable": refusal is None,
        "refusal": refusal,
    }


def detail(stored: StoredLetter) -> dict[str, Any]:
    """``weft dlq show``: the summary, the letter's fields, and the record (parsed when it
    is JSON, else its text)."""
    shown = summary(stored)
    if stored.letter is None:
        return shown
    data = stored.letter.data
    try:
        record: Any = json.loads(data.raw)
    except ValueError:
        record = data.raw
    return shown | {
        "error_type": data.error_type,
        "source_partition": data.partition,
        "source_offset": data.offset,
        "key": data.key,
        "record_chars": len(data.raw),
        "record": record,
    }


def _source(name: str) -> Topic:
    try:
        topic = Topic(name)
    except ValueError:
        raise NotReplayable(f"unknown source topic {name[:200]!r}") from None
    if topic not in REPLAYABLE:
        raise NotReplayable(
            f"dead letters of {topic.value} are not replayed: only its own producer writes "
            "that topic (hand the record to its service instead)"
        )
    return topic


def _decoded(topic: Topic, raw: str) -> Envelope:
    adapter: TypeAdapter[Any] = TypeAdapter(TOPIC_MODELS[topic])
    try:
        envelope: Envelope = read_json(adapter, raw)
    except (ValidationError, UnsupportedSchemaVersion) as exc:
        raise NotReplayable(
            f"the record is not a valid {topic.value} message ({_first(exc)}): its consumer "
            "would dead-letter it again"
        ) from None
    return envelope


def _key(recorded: str | None, envelope: Envelope) -> bytes:
    """The record's own key; a letter naming a key that is neither the message's nor its
    session's would put it on a partition its session does not use."""
    if recorded is None:
        return envelope.key()
    if recorded.encode() not in (envelope.key(), envelope.session_id.encode()):
        raise NotReplayable(
            f"the dead letter's key {recorded[:100]!r} is not its record's: forged or damaged"
        )
    return recorded.encode()


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "value"
        return f"{where}: {first.get('msg', '')}"[:300]
    return str(exc)[:300]

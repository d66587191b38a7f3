"""Dead letters: what a consumer could not decode or process, with the reason."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from weft_contracts.envelope import Envelope


class DeadLetterData(BaseModel):
    """Where the bad record came from and why it was set aside."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_topic: str
    partition: int | None = None
    offset: int | None = None
    consumer_group: str
    reason: str
    error_type: str
    key: str | None = None
    raw: str = Field(description="The record value, decoded as UTF-8 with replacement.")


class DeadLetter(Envelope):
    """A record on ``weft.dlq.v1``. Envelope ids fall back to ``unknown`` when undecodable."""

    type: Literal["dead_letter"] = "dead_letter"
    data: DeadLetterData


DeadLetterRecord = Annotated[DeadLetter, Field(discriminator="type")]

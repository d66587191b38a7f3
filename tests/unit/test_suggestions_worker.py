"""The worker's decisions around the lease (SPEC Q-04), without infrastructure: the set is
announced only by the generator that still holds its lease, suppressed turns are stored
as such, and follow-ups off means no claim at all. The lease and turn log are in-memory
doubles with the same methods; the SQL itself is tested on PostgreSQL
(tests/integration/test_suggestions_lease.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from weft_contracts import (
    CompleteData,
    CompleteEvent,
    Envelope,
    SuggestionsReady,
    Topic,
    TurnStatus,
)
from weft_llm import ChatModel, LLMResponse
from weft_suggestions.config import FixedConfigs, FollowUpConfig
from weft_suggestions.generation import Exchange, FollowUpGenerator
from weft_suggestions.lease import Claim, FinalState, SetKey
from weft_suggestions.turns import FinishedTurn
from weft_suggestions.worker import SuggestionWorker
from weft_testkit.credentials import DevCredentials
from weft_testkit.function_model import FunctionModel, ModelCall, answer, replies

CONFIG = FollowUpConfig(enabled=True, mode="generated")
_KEYS = DevCredentials.load()
TURN_CREDENTIAL = _KEYS.request("t", "u", "s", "r", ttl_s=3600)
EXPIRED_CREDENTIAL = _KEYS.gateway.request(
    tenant_id="t", user_id="u", session_id="s", request_id="r", audience=["kafka"], ttl_s=1,
    issued_at=time.time() - 7200,
)  # fmt: skip


def _turn(**changes: Any) -> FinishedTurn:
    values: dict[str, Any] = {
        "tenant_id": "t",
        "session_id": "s",
        "request_id": "r",
        "user_id": "u",
        "agent_id": "a",
        "user_message_id": "m1",
        "query": "What does it cost?",
        "answer": "20 euros.",
        "status": "completed",
        "is_fallback": False,
        "references": [],
        "credential": TURN_CREDENTIAL,
        "completed_at": None,
    }
    return FinishedTurn(**{**values, **changes})


@dataclass
class Turns:
    turn_row: FinishedTurn

    async def record(self, events: Any) -> None:
        return None

    async def turn(self, tenant_id: str, request_id: str) -> FinishedTurn | None:
        return self.turn_row

    async def exchanges(self, turn: FinishedTurn, limit: int) -> list[Exchange]:
        return [Exchange(question=turn.query, answer=turn.answer)]


@dataclass
class Lease:
    """Holds one set; ``lost`` makes renew/finish fail as after a take-over."""

    lost_on: str = ""
    finished: list[tuple[FinalState, list[dict[str, Any]], str]] = field(default_factory=list)

    async def claim(self, key: SetKey, **_: Any) -> Claim | None:
        return Claim(
            key=key, owner="me", session_id="s", request_id="r", lease_until=datetime.now(UTC)
        )

    async def renew(self, claim: Claim) -> bool:
        return self.lost_on != "renew"

    async def finish(
        self, claim: Claim, state: FinalState, questions: list[dict[str, Any]], reason: str = ""
    ) -> bool:
        if self.lost_on == "finish":
            return False
        self.finished.append((state, questions, reason))
        return True


@dataclass
class Bus:
    published: list[tuple[Topic, Envelope]] = field(default_factory=list)

    async def publish(self, topic: Topic, message: Envelope) -> None:
        self.published.append((topic, message))


def _worker(
    turn: FinishedTurn,
    lease: Lease,
    bus: Bus,
    config: FollowUpConfig = CONFIG,
    *script: Any,
    model: ChatModel | None = None,
    max_pending: int = 256,
    own_credential: str | None = "suggestions-own-credential",
) -> SuggestionWorker:
    return SuggestionWorker(
        turns=Turns(turn),  # type: ignore[arg-type]
        lease=lease,  # type: ignore[arg-type]
        configs=FixedConfigs(config),
        generator=FollowUpGenerator(model or replies(*script), "m"),
        max_pending=max_pending,
        bus=bus,  # type: ignore[arg-type]
        locale="en",
        concurrency=1,
        sweep_interval_s=3600,
        own_credential=None if own_credential is None else (lambda: own_credential),
    )


async def _generate(worker: SuggestionWorker) -> None:
    claimed = await worker.claim_follow_ups("t", "r")
    assert claimed is not None
    await worker.generate(claimed.claim, claimed.config)


async def test_the_set_is_stored_then_announced_with_the_turns_credential() -> None:
    lease, bus = Lease(), Bus()
    await _generate(_worker(_turn(), lease, bus, CONFIG, answer('["Is VAT included?"]')))
    assert [(state, [q["text"] for q in qs]) for state, qs, _ in lease.finished] == [
        ("ready", ["Is VAT included?"])
    ]
    [(topic, notice)] = bus.published
    assert topic is Topic.SESSION_NOTICES
    assert isinstance(notice, SuggestionsReady)
    assert notice.credential == TURN_CREDENTIAL
    assert notice.data.assistant_message_id == "m1a"
    assert [q.text for q in notice.data.questions] == ["Is VAT included?"]


async def test_a_set_whose_turn_credential_ran_out_is_announced_with_the_services_own() -> None:
    # A regenerated set, or one a sweeper took over late: the turn's credential is gone.
    lease, bus = Lease(), Bus()
    turn = _turn(credential=EXPIRED_CREDENTIAL)
    await _generate(_worker(turn, lease, bus, CONFIG, answer('["Is VAT included?"]')))
    [(_, notice)] = bus.published
    assert notice.credential == "suggestions-own-credential"


async def test_a_generator_that_lost_its_lease_neither_asks_nor_announces() -> None:
    for lost_on in ("renew", "finish"):
        lease, bus = Lease(lost_on=lost_on), Bus()
        script = () if lost_on == "renew" else (answer('["Is VAT included?"]'),)
        await _generate(_worker(_turn(), lease, bus, CONFIG, *script))
        assert bus.published == [], lost_on
        assert lease.finished == [], lost_on


async def test_a_fallback_answer_gets_a_suppressed_set_without_a_model_call() -> None:
    lease, bus = Lease(), Bus()
    await _generate(_worker(_turn(is_fallback=True), lease, bus))
    assert lease.finished == [("suppressed", [], "fallback_answer")]
    [(_, notice)] = bus.published
    assert isinstance(notice, SuggestionsReady)
    assert notice.data.state == "suppressed"


async def test_follow_ups_off_claims_nothing() -> None:  # SPEC Q-01: off by default
    worker = _worker(_turn(), Lease(), Bus(), FollowUpConfig())
    assert await worker.claim_follow_ups("t", "r") is None


async def test_a_turn_without_credential_is_stored_but_not_announced() -> None:
    """Every consumer would dead-letter a notice without a credential (a deployment
    without the suggestions service's own key)."""
    lease, bus = Lease(), Bus()
    worker = _worker(
        _turn(credential=None), lease, bus, CONFIG, answer('["Next?"]'), own_credential=None
    )
    await _generate(worker)
    assert [state for state, _, _ in lease.finished] == ["ready"]
    assert bus.published == []


async def test_generations_beyond_the_bound_are_left_to_the_sweeper() -> None:  # invariant 6
    """A burst of turns holds at most ``max_pending`` generations in the process; the
    others keep their claim, whose lease passes and a sweeper takes over."""
    release = asyncio.Event()

    async def slow(call: ModelCall) -> LLMResponse:
        await release.wait()
        return answer('["Next?"]')

    lease, bus = Lease(), Bus()
    worker = _worker(_turn(), lease, bus, model=FunctionModel(reply=slow), max_pending=2)
    completes = [
        CompleteEvent(
            tenant_id="t",
            session_id="s",
            request_id=f"r{i}",
            data=CompleteData(status=TurnStatus.COMPLETED),
        )
        for i in range(5)
    ]
    await worker.on_events(completes)
    assert worker.pending == 2
    release.set()
    await worker.idle()
    assert len(lease.finished) == 2


async def test_a_turns_locale_keys_its_set_and_is_asked_of_the_model() -> None:  # SPEC Q-04
    seen: list[str] = []

    async def reply(call: ModelCall) -> LLMResponse:
        seen.append(str(call.request.messages[0]["content"]))
        return answer('["Le prix inclut-il la TVA ?"]')

    lease, bus = Lease(), Bus()
    worker = _worker(_turn(locale="fr-CA"), lease, bus, model=FunctionModel(reply=reply))
    await _generate(worker)
    assert worker.key(_turn(locale="fr-CA"), CONFIG).locale == "fr-CA"
    assert "locale fr-CA" in seen[0]
    notice = bus.published[0][1]
    assert isinstance(notice, SuggestionsReady) and notice.data.locale == "fr-CA"
    # A turn whose request named no locale keeps the service's default, unasked.
    assert worker.key(_turn(), CONFIG).locale == "en"

"""Follow-ups after each answer, off the consume path (SPEC Q-01, Q-04).

The ``agent.events`` batch handler only records the turns and, for each ``complete`` of an
agent with follow-ups on, claims the set (one fast SQL statement, idempotent); the model
call runs in a task this worker owns. A claimed set whose replica died is found by the
sweeper once its lease has passed and generated again, so nothing is lost when a
replica stops between the claim and the stored set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from weft_contracts import (
    CompleteEvent,
    SuggestedQuestion,
    SuggestionsReady,
    SuggestionsReadyData,
    Topic,
    assistant_message_id,
)
from weft_platform.bus import EventBus
from weft_platform.tasks import cancel_and_wait

from weft_suggestions.config import FollowUpConfig, FollowUpConfigs
from weft_suggestions.filters import AnsweredTurn, suppression
from weft_suggestions.generation import FollowUpGenerator, FollowUpRequest, GenerationFailed
from weft_suggestions.lease import Claim, FinalState, SetKey, SuggestionLease
from weft_suggestions.turns import FinishedTurn, TurnEvent, TurnLog

log = structlog.get_logger(__name__)

FOLLOW_UP = "follow_up"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How one generation ended: the stored state and its questions."""

    state: FinalState
    questions: list[SuggestedQuestion]
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class ClaimedSet:
    """A claim and the configuration the set is generated with."""

    claim: Claim
    config: FollowUpConfig


class SuggestionWorker:
    """Generates, stores and announces follow-up sets."""

    def __init__(
        self,
        *,
        turns: TurnLog,
        lease: SuggestionLease,
        configs: FollowUpConfigs,
        generator: FollowUpGenerator,
        bus: EventBus | None,
        locale: str,
        concurrency: int,
        sweep_interval_s: float,
    ):
        self._turns = turns
        self._lease = lease
        self._configs = configs
        self._generator = generator
        self._bus = bus
        self._locale = locale
        self._slots = asyncio.Semaphore(concurrency)
        self._sweep_interval_s = sweep_interval_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def configs(self) -> FollowUpConfigs:
        """Where follow-up settings come from."""
        return self._configs

    async def on_events(self, events: Sequence[TurnEvent]) -> None:
        """The batch handler of ``agent.events``: record, claim, hand off; never waits
        for a model."""
        await self._turns.record(events)
        for event in events:
            if isinstance(event, CompleteEvent):
                claimed = await self.claim_follow_ups(event.tenant_id, event.request_id)
                if claimed is not None:
                    self._spawn(claimed)

    async def claim_follow_ups(
        self, tenant_id: str, request_id: str, *, regenerate: bool = False
    ) -> ClaimedSet | None:
        """Claim the follow-up set of a finished turn (None: follow-ups are off for its
        agent, the turn is unknown, or another generator has it or had it)."""
        turn = await self._turns.turn(tenant_id, request_id)
        if turn is None:
            return None
        config = await self._configs.follow_ups(tenant_id, turn.agent_id)
        if not config.enabled:
            return None
        claim = await self._lease.claim(
            self.key(turn, config),
            session_id=turn.session_id,
            request_id=turn.request_id,
            config=config,
            regenerate=regenerate,
        )
        return None if claim is None else ClaimedSet(claim=claim, config=config)

    def key(self, turn: FinishedTurn, config: FollowUpConfig) -> SetKey:
        """The cache key of the turn's follow-up set under ``config``."""
        return SetKey(
            tenant_id=turn.tenant_id,
            assistant_message_id=assistant_message_id(turn.user_message_id),
            placement=FOLLOW_UP,
            config_hash=config.config_hash(),
            locale=self._locale,
        )

    async def generate(self, claim: Claim, config: FollowUpConfig) -> Outcome | None:
        """Generate, store and announce the claimed set; None when the lease was lost to
        another replica (which then stores and announces its own)."""
        if not await self._lease.renew(claim):
            return None
        outcome = await self._outcome(claim, config)
        stored = await self._lease.finish(
            claim,
            outcome.state,
            [q.model_dump(mode="json") for q in outcome.questions],
            outcome.reason,
        )
        if not stored:
            log.info("suggestion_lease_lost", message=claim.key.assistant_message_id)
            return None
        await self._announce(claim, outcome)
        return outcome

    async def _outcome(self, claim: Claim, config: FollowUpConfig) -> Outcome:
        turn = await self._turns.turn(claim.key.tenant_id, claim.request_id)
        if turn is None:
            return Outcome(state="failed", questions=[], reason="turn_unknown")
        why = suppression(
            AnsweredTurn(status=turn.status, answer=turn.answer, is_fallback=turn.is_fallback),
            config,
        )
        if why is not None:
            return Outcome(state="suppressed", questions=[], reason=why)
        exchanges = await self._turns.exchanges(turn, config.max_context_turns)
        request = FollowUpRequest(exchanges=exchanges, references=turn.references, config=config)
        try:
            questions = await self._generator.questions(request)
        except GenerationFailed as exc:
            return Outcome(state="failed", questions=[], reason=str(exc)[:200])
        if not questions:
            return Outcome(state="suppressed", questions=[], reason="no_question_left")
        return Outcome(state="ready", questions=questions)

    async def _announce(self, claim: Claim, outcome: Outcome) -> None:
        """``suggestions_ready`` on the session's notices, with the turn's credential."""
        if self._bus is None:
            return
        turn = await self._turns.turn(claim.key.tenant_id, claim.request_id)
        if turn is None or not turn.credential:
            # Consumers dead-letter a record without a credential: the set stays served by
            # the API, and nothing is written that every reader would refuse.
            log.warning("suggestions_notice_without_credential", id=claim.key.assistant_message_id)
            return
        notice = SuggestionsReady(
            tenant_id=claim.key.tenant_id,
            session_id=claim.session_id,
            request_id=claim.request_id,
            credential=turn.credential,
            data=SuggestionsReadyData(
                assistant_message_id=claim.key.assistant_message_id,
                placement=FOLLOW_UP,
                locale=claim.key.locale,
                state=outcome.state,
                questions=outcome.questions,
                reason=outcome.reason,
            ),
        )
        try:
            await self._bus.publish(Topic.SESSION_NOTICES, notice)
        except Exception as exc:  # the set is stored: GET still serves it
            log.error("suggestions_notice_not_published", error=repr(exc), id=notice.id)

    def _spawn(self, claimed: ClaimedSet) -> None:
        task = asyncio.create_task(self._run(claimed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, claimed: ClaimedSet) -> None:
        async with self._slots:
            try:
                await self.generate(claimed.claim, claimed.config)
            except asyncio.CancelledError:
                raise
            except Exception:  # the lease expires and the sweeper tries again
                log.exception(
                    "follow_up_generation_crashed", id=claimed.claim.key.assistant_message_id
                )

    async def sweep(self) -> int:
        """Claim and generate again the sets whose generator's lease passed; how many."""
        taken = 0
        for stale in await self._lease.expired():
            claim = await self._lease.claim(
                stale.key,
                session_id=stale.session_id,
                request_id=stale.request_id,
                config=stale.config,
            )
            if claim is not None:
                taken += 1
                self._spawn(ClaimedSet(claim=claim, config=stale.config))
        return taken

    async def start(self) -> None:
        """Start the sweeper."""
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def stop(self) -> None:
        """Stop the sweeper and every generation (their leases expire; another replica
        takes the sets over)."""
        await cancel_and_wait([self._sweeper, *self._tasks])

    async def idle(self) -> None:
        """Wait until no generation runs (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # PostgreSQL away: try again next round
                log.warning("suggestion_sweep_failed", error=repr(exc))

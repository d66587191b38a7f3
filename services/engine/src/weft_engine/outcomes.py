"""What a step can lead to (STYLE principle 1, SPEC E-20).

Three closed unions, each matched in one place with ``assert_never``:

- ``StepOutcome``: what one LLM response means (``analyze.py``);
- ``StepResult``: what happens next to the turn (``TurnLoop._run``): think again, wait
  for tools, or end;
- ``EndReason``: why the turn ends; ``TurnLoop._finish`` turns each into its last events.

A new way to wait (approvals) is one more ``StepResult`` case; a new way to end (a lost
state) is one more ``EndReason`` case: the type checker then names the
``match`` that must handle it.
"""

from __future__ import annotations

from dataclasses import dataclass

from weft_llm import LLMCallError, ToolCallRequest
from weft_platform.budgets import BudgetExceeded

from weft_engine.state import TurnState

# --- what one LLM response means -------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """Break: the turn ends with this final answer."""

    text: str
    truncated: bool = False
    is_fallback: bool = False


@dataclass(frozen=True)
class Retry:
    """Continue: ask again without consuming a round, after appending ``nudge``."""

    nudge: str


@dataclass(frozen=True)
class Dispatch:
    """Next: run these tool calls, then start the next round."""

    calls: list[ToolCallRequest]


@dataclass(frozen=True)
class Intermediate:
    """Next: a steer message arrived, so this answer is not final; the agent reads it and
    goes on (SPEC E-13)."""

    text: str


StepOutcome = Answer | Retry | Dispatch | Intermediate

# --- what happens next to the turn -----------------------------------------------------


@dataclass(frozen=True)
class Continue:
    """Think again with ``state`` in this step."""

    state: TurnState
    shed: bool = False
    """This round retries after a context overflow shed the history (SPEC E-25): a second
    overflow in the step ends the turn."""


@dataclass(frozen=True)
class Rerun:
    """Think ``state``'s round again in this step: a replica that stopped was streaming
    it, so clients first drop what it streamed (invariant 2)."""

    state: TurnState


@dataclass(frozen=True)
class AwaitTools:
    """The turn waits for its tools: the step ends, the turn lives only in Redis until a
    result or a deadline starts the next step."""

    state: TurnState


@dataclass(frozen=True)
class Ended:
    """The turn ends, for ``reason``."""

    reason: EndReason


StepResult = Continue | Rerun | AwaitTools | Ended

# --- why the turn ends -----------------------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """The model answered (naturally, or a fallback text analyze chose, SPEC E-09..E-14)."""

    state: TurnState
    answer: Answer
    reasoning: str


@dataclass(frozen=True)
class Stopped:
    """The user stopped the turn; ``state`` as stored when the stop was taken (SPEC E-20);
    ``cut_round``: the round whose text was streaming when the stop came (none streamed)."""

    state: TurnState
    cut_round: int | None = None


@dataclass(frozen=True)
class IterationLimit:
    """The turn used its rounds (SPEC E-21)."""

    state: TurnState


@dataclass(frozen=True)
class DeadlineExceeded:
    """The turn ran past ``state.deadline_at``, the engine's wall-clock bound (SPEC E-20).
    Seen at the start of a round and when a step resumes: a turn waiting for tools is
    woken by their own deadlines, and one long model call is bounded by the model's stall
    timeout, so the bound holds within one of those. The bound is stored, not derived from
    ``started_at``, so that a wait that must not count (a human's approval) can push
    ``deadline_at`` back by the time it waited."""

    state: TurnState


@dataclass(frozen=True)
class OverBudget:
    """The tenant's token budget ran out (``metering.py``): seen before a round's model
    call, so the round that crossed it finished and no further call is made."""

    state: TurnState
    exceeded: BudgetExceeded


@dataclass(frozen=True)
class ModelFailed:
    """The model failed for good, after its retries (SPEC E-07)."""

    state: TurnState
    error: LLMCallError


@dataclass(frozen=True)
class ContextOverflow:
    """The provider refused the request as too long again after the one shedding retry
    (SPEC E-25)."""

    state: TurnState
    error: LLMCallError


@dataclass(frozen=True)
class ClosingFailed:
    """The closing synthesis itself failed (after a stop, a failing model, the iteration
    limit or quick-answer's retrieval): no rescue is left."""

    state: TurnState
    error: LLMCallError


@dataclass(frozen=True)
class TooManyTakeovers:
    """The step crashed on every replica that took it over."""

    state: TurnState


@dataclass(frozen=True)
class QuickAnswered:
    """Quick-answer mode's retrieval is done: its one generation answers (SPEC A-01)."""

    state: TurnState


@dataclass(frozen=True)
class AlreadyCompleted:
    """A takeover found the turn's ``complete`` sent (SPEC E-04): the replica stopped
    before it forgot the turn, which is all that is left to do."""

    state: TurnState


@dataclass(frozen=True)
class AlreadyEnded:
    """A stop found no state: the turn ended before it (its ``complete`` is sent)."""


EndReason = (
    Answered
    | Stopped
    | IterationLimit
    | DeadlineExceeded
    | OverBudget
    | ModelFailed
    | ContextOverflow
    | ClosingFailed
    | TooManyTakeovers
    | QuickAnswered
    | AlreadyCompleted
    | AlreadyEnded
)

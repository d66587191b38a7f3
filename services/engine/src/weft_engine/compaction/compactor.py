"""Compactor: fit a request into the context window before each Think (SPEC M-03 .. M-07).

Above ``window - reserve`` (or when the provider reported an overflow) the older part of
the conversation is summarised and the recent part (``keep_recent`` tokens) kept verbatim.
The cut never separates an assistant ``tool_calls`` message from its tool results; when it
falls inside a turn, that turn's first half is summarised on its own to give the kept
second half its context. The summary merges the previous one and carries the file paths
forward. Still over budget, tool results are truncated. Less than 5 % gained: give up (the
request is left unchanged) but still report a checkpoint so the next turn does not
re-summarise the same history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from weft_context.summary import summary_message, summary_text
from weft_context.tokens import TokenEstimator
from weft_contracts import ContextCompactedData
from weft_llm import ChatMessage, ChatModel, UserMessage

from weft_engine.compaction.fileops import (
    extract_file_ops,
    parse_file_ops,
    strip_file_ops,
)
from weft_engine.compaction.settings import MIN_GAIN, CompactionSettings
from weft_engine.compaction.summarizer import SPLIT_TURN_PROMPT, Summarizer, SummaryOutcome
from weft_engine.compaction.truncation import truncate_tool_results

SPLIT_OPEN = "<current_turn_summary>"
SPLIT_CLOSE = "</current_turn_summary>"
CURRENT = "\x00current"


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """What memory stores on the assistant message ``turn_id`` (SPEC M-07)."""

    turn_id: str
    summary: str
    degraded: bool


@dataclass(kw_only=True)
class CompactionResult:
    """The outcome of one ``compact`` call."""

    messages: list[ChatMessage]
    compacted: bool
    tokens_before: int
    tokens_after: int
    reason: str = ""
    split_turn: bool = False
    degraded: bool = False
    gave_up: bool = False
    omitted: int = 0
    tools_truncated: int = 0
    checkpoint: Checkpoint | None = None
    turn_ids: list[str | None] = field(default_factory=list)
    """Turn of each returned message (for the next compaction in the same turn)."""

    def event_data(self, round_: int) -> ContextCompactedData:
        """The ``context_compacted`` payload (SPEC M-06)."""
        return ContextCompactedData(
            round=round_,
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
            reason=self.reason,
            split_turn=self.split_turn,
            degraded=self.degraded,
        )


@dataclass(kw_only=True)
class _Plan:
    """How the conversation divides: head (system), previous summary, body[:cut] summarised
    (``older`` + the split turn's first half ``split``), body[cut:] kept."""

    head: list[ChatMessage]
    previous: str | None
    body: list[ChatMessage]
    groups: list[str]
    cut: int
    split_start: int

    @property
    def older(self) -> list[ChatMessage]:
        return self.body[: self.split_start]

    @property
    def split(self) -> list[ChatMessage]:
        return self.body[self.split_start : self.cut]

    @property
    def tail(self) -> list[ChatMessage]:
        return self.body[self.cut :]


class Compactor:
    """Summarises older history to fit the context window."""

    def __init__(self, model: ChatModel, settings: CompactionSettings, estimator: TokenEstimator):
        self._settings = settings
        self._estimator = estimator
        self._summarizer = Summarizer(model, settings, estimator)

    @property
    def settings(self) -> CompactionSettings:
        """The limits in use."""
        return self._settings

    def needs_compaction(self, tokens: int) -> bool:
        """True above ``window - reserve`` (SPEC M-03)."""
        return tokens > self._settings.threshold

    async def compact(
        self,
        messages: Sequence[ChatMessage],
        turn_ids: Sequence[str | None],
        *,
        tokens: int | None = None,
        force_reason: str | None = None,
    ) -> CompactionResult:
        """Compact ``messages`` if needed. ``turn_ids[i]`` is the stored turn (assistant
        message id) message ``i`` replays, ``None`` for the system prompt, the summary and
        the current turn. ``tokens`` is the engine's current estimate (usage-based, M-01);
        ``force_reason`` compacts regardless (e.g. "overflow")."""
        before = tokens if tokens is not None else self._estimator.messages_tokens(messages)
        unchanged = CompactionResult(
            messages=list(messages), compacted=False, tokens_before=before,
            tokens_after=before, turn_ids=list(turn_ids),
        )  # fmt: skip
        if force_reason is None and not self.needs_compaction(before):
            return unchanged
        plan = self._plan(messages, turn_ids)
        result = await self._summarise(plan, before, force_reason or "threshold")
        if result is None:
            result = CompactionResult(
                messages=list(messages), compacted=False, tokens_before=before,
                tokens_after=before, turn_ids=list(turn_ids), reason=force_reason or "threshold",
            )  # fmt: skip
        self._truncate_if_over(result)
        gain = (before - result.tokens_after) / before if before else 0.0
        if gain < MIN_GAIN:
            unchanged.gave_up, unchanged.reason = True, result.reason
            unchanged.checkpoint = result.checkpoint  # still avoid re-summarising (M-07)
            return unchanged
        result.compacted = True
        return result

    def _plan(self, messages: Sequence[ChatMessage], turn_ids: Sequence[str | None]) -> _Plan:
        head_n = 0
        while head_n < len(messages) and messages[head_n]["role"] == "system":
            head_n += 1
        previous = None
        if head_n < len(messages):
            previous = summary_text(messages[head_n])
        start = head_n + (1 if previous is not None else 0)
        body = list(messages[start:])
        groups = [t if t is not None else CURRENT for t in turn_ids[start:]]
        cut = _safe_cut(body, self._keep_from(body))
        split_start = cut
        cut_group = groups[cut] if cut < len(body) else None
        while split_start > 0 and groups[split_start - 1] == cut_group:
            split_start -= 1
        return _Plan(
            head=list(messages[:head_n]), previous=previous, body=body,
            groups=groups, cut=cut, split_start=split_start,
        )  # fmt: skip

    def _keep_from(self, body: list[ChatMessage]) -> int:
        """First index of the recent messages that fit ``keep_recent`` tokens."""
        budget, index = self._settings.keep_recent, len(body)
        while index > 0:
            cost = self._estimator.message_tokens(body[index - 1])
            if cost > budget:
                break
            budget -= cost
            index -= 1
        return index

    async def _summarise(self, plan: _Plan, before: int, reason: str) -> CompactionResult | None:
        if plan.cut == 0:
            return None  # everything is recent: nothing to summarise
        main = await self._main_summary(plan)
        split = await self._split_summary(plan)
        summary = main.text if main is not None else plan.previous
        out = list(plan.head)
        ids: list[str | None] = [None] * len(plan.head)
        if summary is not None:
            out.append(summary_message(summary))
            ids.append(None)
        if split is not None:
            out.append(_split_message(split.text))
            ids.append(None)
        out.extend(plan.tail)
        ids.extend(None if g == CURRENT else g for g in plan.groups[plan.cut :])
        degraded = any(o is not None and o.degraded for o in (main, split))
        return CompactionResult(
            messages=out, compacted=True, tokens_before=before,
            tokens_after=self._estimator.messages_tokens(out), reason=reason,
            split_turn=bool(plan.split), degraded=degraded, omitted=main.omitted if main else 0,
            checkpoint=self._checkpoint(plan, main), turn_ids=ids,
        )  # fmt: skip

    async def _main_summary(self, plan: _Plan) -> _MainSummary | None:
        """Summary of the turns before the cut turn, merged with the previous summary."""
        if not plan.older:
            return None
        files = parse_file_ops(plan.previous or "")
        files.merge(extract_file_ops(plan.older))  # paths of the whole lot, omitted or not
        previous = strip_file_ops(plan.previous) if plan.previous else None
        fitting, omitted = self._fit_input(plan.older, previous)
        if not fitting:
            # Oversize even alone: archive, and no checkpoint (it would fail in a loop, M-05).
            text = self._summarizer.archive(plan.older, previous)
            return _MainSummary(
                text=_with_files(text, files.render()), degraded=True, omitted=len(plan.older),
                persist=False,
            )  # fmt: skip
        outcome = await self._summarizer.summarize(fitting, previous=previous, omitted=omitted)
        return _MainSummary(
            text=_with_files(outcome.text, files.render()), degraded=outcome.degraded,
            omitted=omitted, persist=True,
        )  # fmt: skip

    async def _split_summary(self, plan: _Plan) -> SummaryOutcome | None:
        """The first half of a split turn, summarised on its own (never persisted)."""
        if not plan.split:
            return None
        fitting, omitted = self._fit_input(plan.split, None)
        outcome = await self._summarizer.summarize(
            fitting or plan.split[-1:], instruction=SPLIT_TURN_PROMPT, omitted=omitted
        )
        files = extract_file_ops(plan.split).render()
        return SummaryOutcome(text=_with_files(outcome.text, files), degraded=outcome.degraded)

    def _fit_input(
        self, messages: list[ChatMessage], previous: str | None
    ) -> tuple[list[ChatMessage], int]:
        """The most recent ``messages`` one summary request can carry, and how many older
        ones were left out (SPEC M-05)."""
        fixed = 1024 + (self._estimator.text_tokens(previous) if previous else 0)
        budget = self._settings.summary_input_cap(fixed)
        kept = 0
        for message in reversed(messages):
            cost = self._estimator.message_tokens(message)
            if cost > budget:
                break
            budget -= cost
            kept += 1
        start = len(messages) - kept
        while start < len(messages) and messages[start]["role"] == "tool":
            start += 1  # never start on results whose call was left out
        return messages[start:], start

    def _checkpoint(self, plan: _Plan, main: _MainSummary | None) -> Checkpoint | None:
        """On the last stored turn the main summary covers: it always ends on that turn's
        boundary; never for the current turn, never for an oversize archive (SPEC M-07)."""
        if main is None or not main.persist:
            return None
        last = plan.groups[plan.split_start - 1]
        if last == CURRENT:
            return None
        return Checkpoint(turn_id=last, summary=main.text, degraded=main.degraded)

    def _truncate_if_over(self, result: CompactionResult) -> None:
        if result.tokens_after <= self._settings.threshold:
            return
        cap = self._settings.tool_result_cap
        messages, count = truncate_tool_results(result.messages, cap, self._estimator)
        if count:
            result.messages = messages
            result.tools_truncated = count
            result.tokens_after = self._estimator.messages_tokens(messages)


@dataclass(frozen=True, kw_only=True)
class _MainSummary:
    text: str
    degraded: bool
    omitted: int
    persist: bool


def _with_files(text: str, files: str) -> str:
    return f"{strip_file_ops(text)}\n\n{files}" if files else text


def _split_message(text: str) -> UserMessage:
    return {
        "role": "user",
        "content": "Summary of the earlier part of the current turn:\n"
        f"{SPLIT_OPEN}\n{text}\n{SPLIT_CLOSE}",
    }


def _safe_cut(body: list[ChatMessage], cut: int) -> int:
    """Move ``cut`` so the kept tail never starts on tool results (their call stays with
    them) and is never empty."""
    while cut < len(body) and body[cut]["role"] == "tool":
        cut += 1
    if cut >= len(body) and body:
        cut = len(body) - 1
        while cut > 0 and body[cut]["role"] == "tool":
            cut -= 1
    return cut

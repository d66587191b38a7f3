"""CachedTokenEstimator: BPE counts remembered per text, so a round does not re-tokenise
the whole conversation.

Before every LLM call the engine counts the turn's messages to decide on compaction
(SPEC M-03). The messages are reloaded from Redis at each step, so nothing else can carry
their counts; between two rounds only a few messages are new. With ``tiktoken`` at a few
MB/s, re-counting a long history would cost more CPU per round than the rest of the
loop. Counts are kept unscaled, so a calibration scale
(SPEC M-02) still applies to every estimate.
"""

from __future__ import annotations

from collections import OrderedDict

from weft_context import TokenEstimator

DEFAULT_MAX_CHARS = 8_000_000
"""Characters of text whose counts are kept (least recently used forgotten first)."""
MIN_CACHED_CHARS = 64
"""Shorter texts are counted again: a lookup would cost about as much as the count."""


class CachedTokenEstimator(TokenEstimator):
    """A :class:`TokenEstimator` that remembers the raw count of each text it counted."""

    def __init__(self, *, max_chars: int = DEFAULT_MAX_CHARS, scale: float = 1.0):
        super().__init__(scale=scale)
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._max_chars = max_chars

    def raw_text_tokens(self, text: str) -> int:
        """Unscaled tokens of ``text``, from the cache when it was counted before."""
        if len(text) < MIN_CACHED_CHARS:
            return super().raw_text_tokens(text)
        count = self._counts.get(text)
        if count is not None:
            self._counts.move_to_end(text)
            return count
        count = super().raw_text_tokens(text)
        self._remember(text, count)
        return count

    def _remember(self, text: str, count: int) -> None:
        if len(text) > self._max_chars:
            return
        self._counts[text] = count
        self._chars += len(text)
        while self._chars > self._max_chars:
            oldest, _ = self._counts.popitem(last=False)
            self._chars -= len(oldest)

    @property
    def cached_texts(self) -> int:
        """How many texts have a remembered count."""
        return len(self._counts)


class _ScaledView(TokenEstimator):
    """One turn's calibration over a shared estimator's counts: the counts are unscaled,
    so turns of sessions with different scales share them."""

    def __init__(self, counts: TokenEstimator, scale: float):
        super().__init__(scale=scale, encoder=False)
        self._counts = counts

    @property
    def uses_bpe(self) -> bool:
        return self._counts.uses_bpe

    def raw_text_tokens(self, text: str) -> int:
        return self._counts.raw_text_tokens(text)


def with_scale(estimator: TokenEstimator, scale: float) -> TokenEstimator:
    """``estimator`` counting text with ``scale`` (clamped) instead of its own, without
    changing it: the engine's estimator is shared by every turn it runs."""
    if scale == estimator.scale:
        return estimator
    return _ScaledView(estimator, scale)

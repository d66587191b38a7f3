"""Compaction limits derived from the context window (SPEC M-03, M-05, M-06)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTEXT_WINDOW = 200_000
DEFAULT_KEEP_RECENT_TOKENS = 20_000
MIN_RESERVE_TOKENS = 16_384
MIN_SUMMARY_TOKENS = 2_000
MIN_GAIN = 0.05
SUMMARY_INPUT_MARGIN = 0.10


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """Knobs of one agent's compaction; the defaults are the reference's."""

    model: str
    context_window: int = DEFAULT_CONTEXT_WINDOW
    completion_budget: int = 4096
    """The agent's max completion tokens (the reserve grows with it)."""
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    summary_output_cap: int = 8192
    """The most the model may write in one answer."""
    stall_timeout_s: float = 120.0
    attempts: int = 2

    @property
    def reserve(self) -> int:
        """max(completion budget + 4096, 16384) (SPEC M-03)."""
        return max(self.completion_budget + 4096, MIN_RESERVE_TOKENS)

    @property
    def threshold(self) -> int:
        """Compact when the request is above window - reserve."""
        return max(1, self.context_window - self.reserve)

    @property
    def keep_recent(self) -> int:
        """Tokens of recent messages kept verbatim; smaller on small windows."""
        return max(1, min(self.keep_recent_tokens, self.threshold // 4))

    @property
    def summary_budget(self) -> int:
        """Output tokens of the summary: f(reserve, output cap, kept budget), at least 2000."""
        return max(
            MIN_SUMMARY_TOKENS,
            min(self.reserve - 4096, self.summary_output_cap, self.keep_recent // 2),
        )

    @property
    def tool_result_cap(self) -> int:
        """Per tool result when truncating: 20 % of the window, within 8192-32768 (M-06)."""
        return min(32_768, max(8_192, self.context_window // 5))

    def summary_input_cap(self, fixed_tokens: int) -> int:
        """Tokens of history one summary request can carry, 10 % margin (SPEC M-05)."""
        room = self.context_window - self.summary_budget - fixed_tokens
        return max(0, int(room * (1 - SUMMARY_INPUT_MARGIN)))

"""Context pieces shared by the engine and the memory service: token estimation (SPEC M-01,
M-02; the engine's budget and compaction, memory's history budget), the summary message
format (M-04; written by the engine's compactor, replayed by memory's history) and the
image content helpers (the engine's vision routing and memory's replay)."""

from weft_context.summary import summary_message, summary_text
from weft_context.tokens import CalibrationSample, TokenEstimator, UsageBaseline, measure_scale

__all__ = [
    "CalibrationSample",
    "TokenEstimator",
    "UsageBaseline",
    "measure_scale",
    "summary_message",
    "summary_text",
]

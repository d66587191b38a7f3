"""Context management for the engine: token estimation (SPEC M-01, M-02), compaction
(M-03 .. M-07) and the client of the memory service (history, checkpoints, memories)."""

from weft_context.compaction import Checkpoint, CompactionResult, CompactionSettings, Compactor
from weft_context.memory_client import LoadedHistory, MemoryClient, MemoryUnavailable, Recalled
from weft_context.summary import summary_message, summary_text
from weft_context.tokens import CalibrationSample, TokenEstimator, UsageBaseline, measure_scale

__all__ = [
    "CalibrationSample",
    "Checkpoint",
    "CompactionResult",
    "CompactionSettings",
    "Compactor",
    "LoadedHistory",
    "MemoryClient",
    "MemoryUnavailable",
    "Recalled",
    "TokenEstimator",
    "UsageBaseline",
    "measure_scale",
    "summary_message",
    "summary_text",
]

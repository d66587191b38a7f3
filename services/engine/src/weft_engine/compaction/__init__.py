"""Context compaction (SPEC M-03 .. M-07): summarise older history to fit the window."""

from weft_engine.compaction.compactor import Checkpoint, CompactionResult, Compactor
from weft_engine.compaction.settings import CompactionSettings

__all__ = ["Checkpoint", "CompactionResult", "CompactionSettings", "Compactor"]

"""Settings of the scripted LLM test double."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PolicyName = Literal["demo", "script"]

TEST_DOUBLE_MODEL = "weft-scripted-test-double"
TEST_DOUBLE_EMBEDDING_MODEL = "weft-scripted-embedding-test-double"


class Settings(BaseModel):
    """How the test double answers; `policy` is `script` when a script path is given."""

    model_config = ConfigDict(frozen=True)

    host: str = "127.0.0.1"
    port: int = 8089
    script_path: Path | None = None
    policy: PolicyName = "demo"
    embedding_dimensions: int = Field(default=256, ge=1, le=8192)
    words_per_chunk: int = Field(default=3, ge=1)
    argument_chunk_chars: int = Field(default=12, ge=1)

"""A tenant's usage as memory reports it (``GET /internal/usage``) and the gateway's admin
API passes it on: one definition for the owner and its reader."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

UsageGroup = Literal["user", "agent"]
"""How a usage report groups its rows."""


class UsageTotals(BaseModel):
    """Summed usage of one user or one agent over a period."""

    key: str
    """The user id or agent id (``group_by``); empty for rows without one."""
    input_tokens: int
    output_tokens: int
    llm_calls: int
    tool_calls: int
    ingestion_bytes: int
    turns: int
    documents: int

"""Declarative base and column types shared by every owner's models."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

JsonB = JSONB().with_variant(JSON(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base of Weft's tables."""

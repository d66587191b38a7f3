"""Weft's PostgreSQL schema (SQLAlchemy models), its Alembic migrations and repositories."""

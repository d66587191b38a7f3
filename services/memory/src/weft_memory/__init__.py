"""memory: sessions, messages and agent steps persisted from ``weft.agent.events.v1``, and
LLM-ready history for the engine (SPEC M-08, M-09, T-20)."""

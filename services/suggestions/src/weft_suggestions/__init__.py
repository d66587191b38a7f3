"""suggestions: starter and follow-up questions (SPEC Q-*). Not built yet: it consumes
``weft.agent.events.v1`` and its HTTP API answers 501 "not available yet"."""

"""suggestions: follow-up questions after each answer (SPEC Q-*). It consumes the turn
events of ``weft.agent.events.v1``, generates follow-ups off the consume path under a
lease (Q-04), announces them on ``weft.session.notices.v1`` and serves them over its
internal API (Q-05)."""

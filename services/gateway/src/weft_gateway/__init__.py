"""gateway: the public REST API and Server-Sent Events edge of Weft (SPEC C-*).

It authenticates API keys, resolves agents through agent-config, publishes turns on
``weft.agent.requests.v1`` and serves each session's events from a Redis Stream that its
projector fills from ``weft.agent.events.v1``.
"""

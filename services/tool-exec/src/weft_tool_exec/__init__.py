"""tool-exec: runs non-sandbox tool calls from ``weft.tool.calls.v1`` (one consumer group;
add replicas to scale) and publishes their results on ``weft.tool.results.v1``."""

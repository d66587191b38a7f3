"""engine: the ReAct loop over Kafka (SPEC E-*). Stateless between steps: a turn's state
lives in Redis while its tools run, so any replica can continue any turn."""

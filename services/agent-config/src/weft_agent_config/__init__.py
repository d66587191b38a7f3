"""agent-config: built-in and custom agents, resolved into the immutable ``AgentConfig``
the engine runs with (SPEC A-*). The skeleton serves built-ins from YAML and custom
agents stored in PostgreSQL; CRUD, presets and sharing come with the gateway issue."""

"""agent-config: built-in and custom agents, resolved into the immutable ``AgentConfig``
the engine runs with (SPEC A-*): built-ins from YAML, custom agents stored in PostgreSQL,
their CRUD, type presets and sharing between tenants of an organisation."""

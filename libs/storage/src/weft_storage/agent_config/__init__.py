"""Tables agent-config owns: agents, sharing, skill packages, MCP registrations.

Only this owner imports this package (import-linter, ``make lint``)."""

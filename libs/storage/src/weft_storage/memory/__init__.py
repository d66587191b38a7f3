"""Tables memory owns: sessions, messages, long-term memory, usage, approvals.

Only this owner imports this package (import-linter, ``make lint``)."""

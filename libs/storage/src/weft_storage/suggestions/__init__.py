"""Tables suggestions owns: suggestion turns, sets and events.

Only this owner imports this package (import-linter, ``make lint``)."""

"""Tables the sandbox owns: workspace checkpoints.

Only this owner imports this package (import-linter, ``make lint``)."""

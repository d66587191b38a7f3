"""Tables the gateway owns: tenants, API keys, admin audit, budgets.

Only this owner imports this package (import-linter, ``make lint``)."""

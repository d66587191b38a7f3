"""Tables knowledge owns: knowledge bases, documents, their files and chunks.

Only this owner imports this package (import-linter, ``make lint``)."""

"""sandbox: per-session workspaces and shell/file tools (SPEC S-*). Not built yet: every
call on ``weft.sandbox.calls.v1`` is answered with a clear "not available yet" result."""

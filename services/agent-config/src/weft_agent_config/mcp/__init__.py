"""A tenant's MCP servers (SPEC T-19, H-06): registrations, their secrets, tools and OAuth."""

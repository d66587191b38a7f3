"""weft: the command line of Weft operators and users (docs/cli.md)."""

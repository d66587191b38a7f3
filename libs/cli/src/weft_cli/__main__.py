"""``python -m weft_cli`` is ``weft``."""

from weft_cli.app import main

main()

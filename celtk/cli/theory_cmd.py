"""``celtk theory`` (filled in by the theory module)."""

COMMANDS: list = []

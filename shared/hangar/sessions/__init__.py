"""The session engine: checkpoint, restore and the workspace they work on (the session service
itself builds on these)."""

"""hangar's own note at the end of a turn's prompt (:func:`hangar.exchange.layout.prompt_note`):
its markers, and taking it out of what a harness says back. Imports nothing of hangar's, so the
harness adapters can use it at no cost."""

from __future__ import annotations

import re

NOTE_OPEN, NOTE_CLOSE = "<hangar-exchange>", "</hangar-exchange>"
_NOTE = re.compile(rf"\s*{re.escape(NOTE_OPEN)}.*?(?:{re.escape(NOTE_CLOSE)}|\Z)", re.S)
"""The note, or what is left of one cut at its end."""
_NOTE_TAIL = re.compile(rf"\A.*?{re.escape(NOTE_CLOSE)}\s*", re.S)
"""What is left of a note cut at its start: everything up to its closing."""


def without_note(text: str) -> str:
    """``text`` without hangar's own note (``prompt_note``), for what a harness says back:
    a CLI that quotes the prompt in an error or a summary must not show people hangar's
    instructions. A note cut short (what a harness says is kept to its head or its tail) goes
    too: from its opening to the end, or from the start to its closing."""
    close, opening = text.find(NOTE_CLOSE), text.find(NOTE_OPEN)
    if close >= 0 and (opening < 0 or close < opening):
        text = _NOTE_TAIL.sub("", text, count=1)
    return _NOTE.sub("", text) if NOTE_OPEN in text else text

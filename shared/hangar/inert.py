"""Text from an agent or a sandbox made inert for a terminal: shown, never obeyed.

A summary, a question, a file name or a log line can carry control characters that a terminal
acts on (ESC starts a sequence that sets the window title, clears the screen, writes the
clipboard with OSC 52; U+009B is a one-character CSI; BEL, backspace and CR move or sound).
:func:`inert` shows each of them as a visible escape instead, so what hangar prints is exactly
what the agent wrote, and nothing more happens.

The escape is the one Python and C use: ``\\x1b`` for ESC, ``\\x07`` for BEL, ``\\x9b`` for the
C1 CSI, ``\\u202e`` for a bidirectional override, ``\\udc80`` for a lone surrogate (a name that
was not UTF-8). What is escaped: the C0 controls U+0000 to U+001F, DEL U+007F, the C1 controls
U+0080 to U+009F, the bidirectional embeddings, overrides and isolates (U+202A to U+202E,
U+2066 to U+2069: they reorder what follows, so a name could read as another), and lone
surrogates (unprintable). Newline and tab are kept where text may span lines (``lines=True``,
with CRLF read as a newline); everywhere else they are escaped too, so a one-line field (a file
name, an option) cannot start a line of its own. A backslash is left as it is: the escapes are
for reading, not for decoding back.

Standard library only: the CLI imports it on its error path.
"""

from __future__ import annotations

import re

__all__ = ["inert"]

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ANYWHERE = re.compile(f"[{_CONTROLS}\n\t]")
_IN_LINES = re.compile(f"[{_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def inert(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character shown as a visible escape (see the module doc);
    ``lines`` keeps newlines and tabs. Idempotent: the escapes are printable ASCII."""
    if lines:
        return _IN_LINES.sub(_escape, text.replace("\r\n", "\n"))
    return _ANYWHERE.sub(_escape, text)

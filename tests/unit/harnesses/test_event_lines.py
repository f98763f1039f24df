"""A run log rendered as it streams (what ``log?format=lines`` answers)."""

from __future__ import annotations

import json

from hangar.harnesses.events import EventLines, describe_event


def said(text: str) -> bytes:
    event = {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}
    return json.dumps(event).encode() + b"\n"


def test_a_log_cut_anywhere_renders_as_the_whole_log_does() -> None:
    log = said("first") + b'{"type": "system", "subtype": "init"}\n' + said("x" * 5000) + b"tail"
    expected = b"".join(
        (describe_event(line) or "").encode() + b"\n"
        for line in log.split(b"\n") if describe_event(line)
    )  # fmt: skip
    assert expected.startswith(b"first\n") and expected.endswith(b"tail\n")
    for size in (1, 2, 7, 64, 4096, len(log)):
        lines = EventLines()
        out = b"".join(lines.feed(log[i : i + size]) for i in range(0, len(log), size))
        assert out + lines.close() == expected, size


def test_a_line_is_rendered_only_once_it_ends_or_the_log_does() -> None:
    lines = EventLines()
    assert lines.feed(said("half")[:10]) == b""
    assert lines.feed(said("half")[10:]) == b"half\n"
    assert lines.close() == b""

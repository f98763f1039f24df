"""hangar's own note at the end of a prompt never reaches people through what a harness says
back: a failure, its standard error or its summary that quote the prompt lose the note."""

from __future__ import annotations

import json

from hangar.exchange.note import NOTE_CLOSE, NOTE_OPEN, without_note
from hangar.harnesses import TurnSpec, get_harness

PROMPT = f"fix the build\n\n{NOTE_OPEN}\nhangar: your exchange folder is $HANGAR_IO\n{NOTE_CLOSE}"


def lines(*events: dict[str, object]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_a_failure_quoting_the_prompt_fails_the_turn_without_hangars_note() -> None:
    result = get_harness("claude").outcome(
        TurnSpec("x", "/w", new_id="u1"), 1,
        lines({"type": "system", "subtype": "init", "session_id": "u1"},
              {"type": "result", "is_error": True, "session_id": "u1",
               "result": f"API Error: 400 no rule for the prompt: {PROMPT}"}),
        b"")  # fmt: skip
    assert result.error is not None
    assert result.error.message == ("claude exited with status 1: API Error: 400 no rule for "
                                    "the prompt: fix the build")  # fmt: skip
    assert "hangar-exchange" not in (result.summary or "")


def test_standard_error_holding_the_end_of_the_note_loses_it() -> None:
    stderr = (PROMPT[-60:] + "\nerror: the model service refused the request\n").encode()
    result = get_harness("pi").outcome(TurnSpec("x", "/w"), 2, b"", stderr)
    assert result.error is not None
    assert result.error.message == ("pi exited with status 2: error: the model service refused "
                                    "the request")  # fmt: skip


def test_text_without_the_note_is_left_as_it_is_and_a_note_cut_short_goes_to_the_end() -> None:
    assert without_note("all good <b>") == "all good <b>"
    assert without_note(f"said: fix it\n{NOTE_OPEN}\nhangar: your exch") == "said: fix it"

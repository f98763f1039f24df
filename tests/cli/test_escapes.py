"""Agent text is inert in a terminal: what a turn hands back (its summary, its question and
options, an artifact's name, its run log) carrying ESC and OSC sequences, C1 CSI, BEL,
backspace and CR reaches the CLI's output as visible escapes (``\\x1b``), never raw; ``--json``
encodes them as JSON does. Against a real ``hangar serve`` with the Antigravity stand-in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hangar.cli.follow import print_outcome
from hangar.cli.render import print_session, show_bytes
from tests.cli.conftest import Cli, Server
from tests.cli.test_cli import identity

RAW = ("\x1b", "\x07", "\x9b", "\x08", "\r")
SUMMARY = r"Done \033]52;c;aGVsbG8=\007 \033[2J\a\b\r over\nsecond line"
TURN = "\n".join([
    "make trouble",
    r"run: printf '\033]0;log\007 plain log line\n'",
    r"""run: mkdir -p "$HANGAR_IO/out/artifacts" && """
    r"""printf x > "$HANGAR_IO/out/artifacts/$(printf 'art\033]0;t\007.txt')" """,
    r"""run: hangar-agent question "$(printf 'Pick \033]0;owned\007 one')" """
    r"""--option "$(printf 'red\033[2J')" --option "$(printf 'blue\302\23331m')" """,
    f"""run: hangar-agent done "$(printf '{SUMMARY}')" """,
])  # fmt: skip


def inert(text: str) -> None:
    for char in RAW:
        assert char not in text, (char, text)


@pytest.mark.sandbox
def test_a_turns_escape_sequences_reach_the_terminal_as_visible_escapes(
    server: Server, cli: Cli, remote: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), *identity())[0] == 0
    code, out, err = cli("session", "new", "esc", TURN, "--env", "app", "--harness",
                         "antigravity", "-w")  # fmt: skip
    assert code == 0, err
    inert(out + err)
    assert (r"Done \x1b]52;c;aGVsbG8=\x07 \x1b[2J\x07\x08\x0d over" + "\nsecond line\n") in out
    assert r"needs input: Pick \x1b]0;owned\x07 one" in out
    assert "  1. red\\x1b[2J\n  2. blue\\x9b31m\n" in out
    assert (r"hangar: warning: out/artifacts/art\x1b]0;t\x07.txt: a name with control "
            "characters; skipped") in err  # fmt: skip

    code, out, err = cli("session", "get", "esc")
    assert code == 0, err
    inert(out + err)
    assert r"\x1b]52;c;aGVsbG8=\x07 \x1b[2J" in out
    assert r"(options: red\x1b[2J | blue\x9b31m)" in out
    assert r"warning: out/artifacts/art\x1b]0;t\x07.txt" in out
    code, out, _ = cli("session", "list")
    assert code == 0 and r"Pick \x1b]0;owned\x07 one" in out
    inert(out)

    code, out, _ = cli("session", "get", "esc", "--json")
    inert(out)
    turn = json.loads(out)["turns"][0]
    assert turn["summary"].startswith("Done \x1b]52;c;aGVsbG8=\x07 \x1b[2J\x07\x08\r over")
    assert json.loads(out)["question_options"] == ["red\x1b[2J", "blue\x9b31m"]

    code, out, _ = cli("session", "log", "esc")
    assert code == 0 and r"\x1b]0;log\x07 plain log line" in out
    inert(out)
    code, out, _ = cli("session", "log", "esc", "--raw")  # to a pipe: the bytes as they are
    assert code == 0 and "\x1b]0;log\x07 plain log line" in out


def test_a_file_name_an_option_and_a_summary_from_older_records_print_inert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    turn = {"n": 1, "outcome": "needs_input", "message": "go", "summary": "a\x1b[2J\nb\tc",
            "artifacts": [{"path": "x\x1b]0;t\x07\n.txt", "size": 1}],
            "warnings": ["w\x9b"], "question": "Q\x07?", "question_options": ["o\x1b"]}  # fmt: skip
    print_outcome("s", turn)
    out, err = capsys.readouterr()
    inert(out + err)
    assert out.startswith("a\\x1b[2J\nb\tc\nartifact: x\\x1b]0;t\\x07\\x0a.txt (1 bytes;")
    assert "needs input: Q\\x07?\n  1. o\\x1b\n" in out and err == "hangar: warning: w\\x9b\n"
    session = {"name": "s", "id": "ses-1", "state": "idle", "last_active_at": None,
               "title": "t\x1b]0;x\x07", "harness": "claude", "repo": "r", "branch": "main",
               "idle_minutes": 30, "sandbox_id": None, "turns": [turn]}  # fmt: skip
    print_session(session)
    out, _ = capsys.readouterr()
    inert(out)
    assert "title:    t\\x1b]0;x\\x07\n" in out and "artifacts: x\\x1b]0;t\\x07\\x0a.txt" in out


def test_raw_bytes_go_to_a_pipe_as_they_are_and_to_a_terminal_escaped(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"+a\x1b[2J\tb\r\n+\xff\xc2\x9b\n"
    show_bytes(data)
    assert capsysbinary.readouterr().out == data
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    show_bytes(data)
    assert capsysbinary.readouterr().out == b"+a\\x1b[2J\tb\n+\\xff\\x9b\n"

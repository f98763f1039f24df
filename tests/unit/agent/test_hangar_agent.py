"""hangar/agent/hangar_agent.py (the agent's ``hangar-agent`` command) run by its file path with
the sandbox's interpreter, ``-I -S``, on an exchange folder under tmp_path named by HANGAR_IO.

Every test compares the whole folder afterwards, so a stray temporary file or a write on bad
input fails it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "shared" / "hangar" / "agent" / "hangar_agent.py"
PYTHON = "/usr/bin/python3"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture
def io(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".hangar" / "sessions" / "s1"
    folder.mkdir(parents=True)
    return folder


def hangar_agent(
    io: Path | None, *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HANGAR_IO"}
    if io is not None:
        env["HANGAR_IO"] = str(io)
    proc = subprocess.run(
        [PYTHON, "-I", "-S", str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd or (io.parent if io is not None else None),
        timeout=60,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def ok(io: Path | None, *args: str, stdin: bytes = b"", cwd: Path | None = None) -> str:
    proc = hangar_agent(io, *args, stdin=stdin, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1, proc.stdout
    return proc.stdout


def tree(top: Path) -> dict[str, object]:
    """Every path under ``top``: a file's bytes, "dir" for a folder, "-> target" for a link."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(top))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


# progress -------------------------------------------------------------------------------------


def test_progress_appends_one_json_line_per_call_with_a_utc_timestamp(io: Path) -> None:
    said = ok(io, "progress", "--pct", "40", "running the tests\nof the parser")
    ok(io, "progress", "pushed")

    assert "out/progress.jsonl" in said
    assert set(tree(io)) == {"out", "out/progress.jsonl"}
    raw = (io / "out" / "progress.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 2
    first, second = (json.loads(line) for line in raw.splitlines())
    assert TS.match(first.pop("ts")) and TS.match(second.pop("ts"))
    assert first == {"message": "running the tests of the parser", "pct": 40}
    assert second == {"message": "pushed"}


@pytest.mark.parametrize(
    "args",
    [["--pct", "101", "x"], ["--pct", "-1", "x"], ["--pct", "4.5", "x"], [""], [" \n "],
     ["x" * 1001]],
    ids=["pct over 100", "negative pct", "fractional pct", "empty", "blank", "1001 characters"],
)  # fmt: skip
def test_progress_with_bad_input_exits_2_and_writes_nothing(io: Path, args: list[str]) -> None:
    proc = hangar_agent(io, "progress", *args)
    assert proc.returncode == 2 and proc.stderr.strip()
    assert tree(io) == {}


def test_a_progress_message_of_1000_characters_is_accepted(io: Path) -> None:
    ok(io, "progress", "é" * 1000)
    line = json.loads((io / "out" / "progress.jsonl").read_text(encoding="utf-8"))
    assert line["message"] == "é" * 1000


# ask and question -----------------------------------------------------------------------------


def test_ask_writes_the_question_removes_old_options_and_says_to_end_the_turn(io: Path) -> None:
    (io / "out").mkdir()
    (io / "out" / "QUESTION.json").write_text('{"question": "old", "options": ["a"]}')

    said = ok(io, "ask", "Which database should I use?")

    assert "end your turn" in said
    assert tree(io) == {"out": "dir", "out/QUESTION.md": b"Which database should I use?\n"}


def test_question_writes_the_question_and_its_options(io: Path) -> None:
    said = ok(io, "question", "--option", "Postgres", "--option", "SQLite ✓", "Which database?")

    assert "end your turn" in said
    assert tree(io) == {
        "out": "dir",
        "out/QUESTION.md": b"Which database?\n",
        "out/QUESTION.json": (
            json.dumps({"question": "Which database?", "options": ["Postgres", "SQLite ✓"]},
                       indent=2, ensure_ascii=False) + "\n"
        ).encode(),
    }  # fmt: skip


def test_question_takes_five_options_of_80_characters(io: Path) -> None:
    options = [c * 80 for c in "abcde"]
    ok(io, "question", *[a for o in options for a in ("--option", o)], "Pick one")
    assert json.loads((io / "out" / "QUESTION.json").read_text())["options"] == options


@pytest.mark.parametrize(
    "options",
    [[], ["a", "b", "c", "d", "e", "f"], ["x" * 81], ["two\nlines"], [""]],
    ids=["no option", "6 options", "an 81-character option", "a newline", "an empty option"],
)
def test_question_with_bad_options_exits_2_and_writes_nothing(io: Path, options: list[str]) -> None:
    proc = hangar_agent(io, "question", *[a for o in options for a in ("--option", o)], "Pick")
    assert proc.returncode == 2 and proc.stderr.strip()
    assert tree(io) == {}


# artifact -------------------------------------------------------------------------------------


def test_artifact_copies_a_file_with_its_mode_under_its_basename(io: Path, tmp_path: Path) -> None:
    script = tmp_path / "build.sh"
    script.write_bytes(b"#!/bin/sh\necho built\n")
    script.chmod(0o755)

    said = ok(io, "artifact", str(script))

    assert "out/artifacts/build.sh" in said
    assert tree(io) == {"out": "dir", "out/artifacts": "dir",
                        "out/artifacts/build.sh": b"#!/bin/sh\necho built\n"}  # fmt: skip
    assert stat.S_IMODE((io / "out/artifacts/build.sh").stat().st_mode) == 0o755


def test_artifact_copies_a_folder_and_skips_the_links_and_fifos_in_it(
    io: Path, tmp_path: Path
) -> None:
    report = tmp_path / "report"
    (report / "sub").mkdir(parents=True)
    (report / "index.html").write_text("<h1>report</h1>")
    (report / "sub" / "data.csv").write_text("a,b\n")
    (report / "secret-link").symlink_to("/etc/hostname")
    (report / "sub" / "dir-link").symlink_to(tmp_path)
    os.mkfifo(report / "pipe")

    proc = hangar_agent(io, "artifact", str(report), "reports/latest")

    assert proc.returncode == 0, proc.stderr
    assert "out/artifacts/reports/latest" in proc.stdout and "2 files" in proc.stdout
    assert tree(io) == {
        "out": "dir",
        "out/artifacts": "dir",
        "out/artifacts/reports": "dir",
        "out/artifacts/reports/latest": "dir",
        "out/artifacts/reports/latest/index.html": b"<h1>report</h1>",
        "out/artifacts/reports/latest/sub": "dir",
        "out/artifacts/reports/latest/sub/data.csv": b"a,b\n",
    }
    for name in ("secret-link: a symbolic link", "sub/dir-link: a symbolic link", "pipe: a FIFO"):
        assert name in proc.stderr


def test_artifact_replaces_what_was_at_its_name(io: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dist"
    folder.mkdir()
    (folder / "new.txt").write_text("new")
    ok(io, "artifact", str(folder), "out-file")
    assert tree(io / "out" / "artifacts") == {"out-file": "dir", "out-file/new.txt": b"new"}
    single = tmp_path / "single.txt"
    single.write_text("single")

    ok(io, "artifact", str(single), "out-file")
    assert tree(io / "out" / "artifacts") == {"out-file": b"single"}
    ok(io, "artifact", str(folder), "out-file")
    assert tree(io / "out" / "artifacts") == {"out-file": "dir", "out-file/new.txt": b"new"}


def test_artifact_follows_path_when_it_is_a_link_to_a_file_or_a_folder(
    io: Path, tmp_path: Path
) -> None:
    (tmp_path / "real.txt").write_text("real")
    (tmp_path / "real-dir").mkdir()
    (tmp_path / "real-dir" / "f").write_text("f")
    (tmp_path / "to-file").symlink_to("real.txt")
    (tmp_path / "to-dir").symlink_to("real-dir")

    ok(io, "artifact", "to-file", cwd=tmp_path)
    ok(io, "artifact", "to-dir/", cwd=tmp_path)

    assert tree(io / "out" / "artifacts") == {"to-file": b"real", "to-dir": "dir",
                                              "to-dir/f": b"f"}  # fmt: skip


def test_artifact_of_a_folder_that_holds_the_exchange_folder_skips_it(io: Path) -> None:
    home = io.parent.parent.parent
    (home / "notes.txt").write_text("notes")

    proc = hangar_agent(io, "artifact", str(home), "home")

    assert proc.returncode == 0, proc.stderr
    copied = tree(io / "out" / "artifacts" / "home")
    assert copied["notes.txt"] == b"notes"
    assert copied[".hangar/sessions/s1/out"] == "dir"
    assert ".hangar/sessions/s1/out/artifacts" not in copied
    assert "the artifacts folder" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [["{src}", "../escape"], ["{src}", "a/../../escape"], ["{src}", "/abs"], ["{src}", "."],
     ["{tmp}/missing"], ["{fifo}"], ["{fifo-link}"], ["{src}", "a\r\nb"],
     ["{src}", "t\x1b]0;x\x07"]],
    ids=["NAME with ..", "NAME leading out", "absolute NAME", "empty NAME", "missing PATH",
         "a FIFO", "a link to a FIFO", "NAME with CR LF", "NAME with ESC"],
)  # fmt: skip
def test_artifact_with_bad_input_exits_2_and_writes_nothing(
    io: Path, tmp_path: Path, args: list[str]
) -> None:
    (tmp_path / "src.txt").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fifo-link").symlink_to("fifo")
    names = {"{src}": str(tmp_path / "src.txt"), "{fifo}": str(tmp_path / "fifo"),
             "{fifo-link}": str(tmp_path / "fifo-link")}  # fmt: skip
    given = [names.get(a, a.replace("{tmp}", str(tmp_path))) for a in args]

    proc = hangar_agent(io, "artifact", *given)

    assert proc.returncode == 2 and proc.stderr.strip()
    assert tree(io) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "fifo-link", "home", "src.txt"]


# result and done ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["inline", "stdin", "file"])
def test_result_writes_the_json_value_indented(io: Path, tmp_path: Path, how: str) -> None:
    value = '{"ok": true, "files": ["a.py"], "note": "déjà vu"}'
    (tmp_path / "r.json").write_text(value, encoding="utf-8")
    arg = {"inline": value, "stdin": "-", "file": "@" + str(tmp_path / "r.json")}[how]

    said = ok(io, "result", arg, stdin=value.encode() if how == "stdin" else b"")

    assert "out/result.json" in said
    expected = '{\n  "ok": true,\n  "files": [\n    "a.py"\n  ],\n  "note": "déjà vu"\n}\n'
    assert tree(io) == {"out": "dir", "out/result.json": expected.encode()}


@pytest.mark.parametrize(
    "arg", ['{"ok": tru', "NaN", "", "@{tmp}/missing.json"],
    ids=["invalid JSON", "NaN", "empty", "missing file"],
)  # fmt: skip
def test_result_that_is_not_json_exits_2_and_writes_nothing(
    io: Path, tmp_path: Path, arg: str
) -> None:
    (io / "out").mkdir()
    (io / "out" / "result.json").write_text("[1]\n")
    before = tree(io)

    proc = hangar_agent(io, "result", arg.replace("{tmp}", str(tmp_path)))

    assert proc.returncode == 2
    assert tree(io) == before
    if arg == '{"ok": tru':
        assert "not valid JSON: Expecting value: line 1 column 8" in proc.stderr


def test_done_writes_the_summary_ending_with_a_newline(io: Path) -> None:
    said = ok(io, "done", "Fixed the parser; all tests pass.")
    assert "RESULT.md" in said
    assert tree(io) == {"RESULT.md": b"Fixed the parser; all tests pass.\n"}

    ok(io, "done", "-", stdin=b"# Done\n\nFrom stdin.\n")
    assert tree(io) == {"RESULT.md": b"# Done\n\nFrom stdin.\n"}


def test_done_with_an_empty_summary_exits_2_and_writes_nothing(io: Path) -> None:
    assert hangar_agent(io, "done", "-", stdin=b"\n").returncode == 2
    assert hangar_agent(io, "done", "").returncode == 2
    assert tree(io) == {}


# The command itself ---------------------------------------------------------------------------


def test_without_hangar_io_every_command_exits_2_naming_it(tmp_path: Path) -> None:
    for io in (None, tmp_path / "missing", tmp_path / "a-file"):
        (tmp_path / "a-file").write_text("")
        proc = hangar_agent(io, "done", "summary", cwd=tmp_path)
        assert proc.returncode == 2
        assert "HANGAR_IO" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("command", ["progress", "ask", "question", "artifact", "result", "done"])
def test_every_command_has_help_saying_what_it_writes(command: str) -> None:
    proc = hangar_agent(None, command, "--help")
    assert proc.returncode == 0, proc.stderr
    writes = {"progress": "out/progress.jsonl", "ask": "out/QUESTION.md",
              "question": "out/QUESTION.json", "artifact": "out/artifacts/NAME",
              "result": "out/result.json", "done": "RESULT.md"}  # fmt: skip
    assert writes[command] in proc.stdout
    overview = hangar_agent(None, "--help")
    assert overview.returncode == 0 and command in overview.stdout and "HANGAR_IO" in overview.stdout


def test_installed_with_its_shebang_it_runs_as_a_command(io: Path, tmp_path: Path) -> None:
    installed = tmp_path / "bin" / "hangar-agent"
    installed.parent.mkdir()
    installed.write_text("#!/usr/bin/python3 -IS\n" + SCRIPT.read_text())
    installed.chmod(0o755)

    proc = subprocess.run([str(installed), "done", "shipped"], capture_output=True,
                          env={"HANGAR_IO": str(io), "PATH": "/usr/bin:/bin"}, timeout=60)  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    assert (io / "RESULT.md").read_text() == "shipped\n"

"""hangar/agent/exchange.py run as sandboxes get it (``agent.command("exchange", ...)``: the
installed launcher and modules, run by the sandbox's interpreter with ``-I -S``) on exchange
folders under tmp_path.

Each test builds the agent's HOME with an exchange folder in it and, beside it, an ``outside``
folder of secrets: whatever links the agent plants, no byte of ``outside`` may be printed.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import installed_scripts as scripts

SECRET = b"outside secret 5f1c"
BIG = 1 << 20


@dataclass
class World:
    home: Path
    io: Path
    outside: Path

    @property
    def out(self) -> Path:
        return self.io / "out"

    @property
    def artifacts(self) -> Path:
        return self.io / "out" / "artifacts"


@pytest.fixture
def world(tmp_path: Path) -> World:
    root = tmp_path.resolve()
    home = root / "home"
    io = home / ".hangar" / "sessions" / "s1"
    io.mkdir(parents=True)
    outside = root / "outside"
    (outside / "out" / "artifacts").mkdir(parents=True)
    for path in ("secret.txt", "out/result.json", "out/artifacts/secret.txt", "RESULT.md"):
        (outside / path).write_bytes(SECRET)
    return World(home, io, outside)


def exchange(*args: object, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        scripts.command("exchange", *map(str, args)), input=stdin, capture_output=True, timeout=60
    )


def collect(world: World, max_result: int = BIG, max_artifact: int = BIG) -> dict[str, object]:
    proc = exchange("collect", world.io, max_result, max_artifact)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 1, proc.stdout
    answer: dict[str, object] = json.loads(lines[0])
    return answer


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def empty(warnings: list[str]) -> dict[str, object]:
    return {
        "summary": None,
        "summary_truncated": False,
        "result": {"present": False, "size": 0, "too_large": False, "text": None},
        "question": None,
        "question_json": None,
        "artifacts": [],
        "warnings": warnings,
    }


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# collect --------------------------------------------------------------------------------------


def test_collect_reads_summary_result_question_and_artifacts(world: World) -> None:
    write(world.io / "RESULT.md", "Done: fixed it ✓\n".encode())
    write(world.out / "result.json", b'{"ok": true}\n')
    write(world.out / "QUESTION.md", b"Which one?\n")
    write(world.out / "QUESTION.json", b'{"question": "Which one?", "options": ["a"]}\n')
    write(world.artifacts / "report.html", b"<h1>hi</h1>")
    write(world.artifacts / "logs" / "build.log", b"\xff\x00binary")
    write(world.artifacts / "logs" / "empty", b"")
    write(world.io / "in" / "1" / "attachment.txt", b"not an artifact")

    answer = collect(world)

    assert answer == {
        "summary": "Done: fixed it ✓\n",
        "summary_truncated": False,
        "result": {"present": True, "size": 13, "too_large": False, "text": '{"ok": true}\n'},
        "question": "Which one?\n",
        "question_json": '{"question": "Which one?", "options": ["a"]}\n',
        "artifacts": [
            {"path": "logs/build.log", "size": 8, "sha256": sha(b"\xff\x00binary")},
            {"path": "logs/empty", "size": 0, "sha256": sha(b"")},
            {"path": "report.html", "size": 11, "sha256": sha(b"<h1>hi</h1>")},
        ],
        "warnings": [],
    }


def test_collect_on_a_missing_folder_or_out_gives_the_empty_answer(world: World) -> None:
    assert collect(World(world.home, world.home / "nope", world.outside)) == empty([])
    assert collect(world) == empty([])
    write(world.io / "RESULT.md", b"summary only")
    assert collect(world) == {**empty([]), "summary": "summary only"}


def test_a_summary_over_64_kib_is_cut_at_a_whole_character(world: World) -> None:
    write(world.io / "RESULT.md", "é".encode() * 40_000)  # 80,000 bytes

    answer = collect(world)

    assert answer["summary"] == "é" * 32_768 and answer["summary_truncated"] is True


def test_a_question_over_16_kib_is_cut_to_16_kib(world: World) -> None:
    write(world.out / "QUESTION.md", b"q" * 20_000)
    write(world.out / "QUESTION.json", b"j" * 20_000)
    answer = collect(world)
    assert answer["question"] == "q" * 16_384 and answer["question_json"] == "j" * 16_384


def test_a_result_over_the_cap_is_too_large_and_not_read(world: World) -> None:
    write(world.out / "result.json", b'{"big": "' + b"x" * 200 + b'"}')

    answer = collect(world, max_result=100)

    assert answer["result"] == {"present": True, "size": 211, "too_large": True, "text": None}
    assert collect(world, max_result=211)["result"]["text"].startswith('{"big"')  # type: ignore[index]


@pytest.mark.parametrize(
    "path", ["RESULT.md", "out/result.json", "out/QUESTION.md", "out/QUESTION.json"]
)
def test_a_file_that_is_a_link_to_a_file_outside_is_skipped_unread(
    world: World, path: str
) -> None:
    (world.io / path).parent.mkdir(parents=True, exist_ok=True)
    (world.io / path).symlink_to(world.outside / "secret.txt")

    answer = collect(world)  # checks that the secret is not in the output

    assert answer == empty([f"{path}: a symbolic link, skipped"])


@pytest.mark.parametrize("folder", ["out", "out/artifacts"])
def test_an_out_or_artifacts_folder_that_is_a_link_is_not_followed(
    world: World, folder: str
) -> None:
    (world.io / folder).parent.mkdir(parents=True, exist_ok=True)
    (world.io / folder).symlink_to(world.outside / folder)

    answer = collect(world)

    assert answer == empty([f"{folder}: a symbolic link, skipped"])


@pytest.mark.parametrize("link", ["io", "ancestor"])
def test_an_io_folder_reached_through_a_link_is_treated_as_missing_with_a_warning(
    world: World, link: str
) -> None:
    if link == "io":
        io = world.home / ".hangar" / "sessions" / "s2"
        io.symlink_to(world.outside)
        warned = str(io)
    else:  # ~/.hangar/sessions itself is a link: IO_DIR's last part is a real folder
        write(world.outside / "s1" / "RESULT.md", SECRET)
        write(world.outside / "s1" / "out" / "result.json", SECRET)
        sessions = world.home / ".hangar" / "sessions"
        sessions.rename(world.home / ".hangar" / "moved")
        sessions.symlink_to(world.outside)
        io = sessions / "s1"
        warned = str(sessions)

    answer = collect(World(world.home, io, world.outside))

    assert answer == empty([f"IO_DIR {warned}: a symbolic link, treated as missing"])


def test_a_fifo_as_result_json_does_not_block_and_is_warned_about(world: World) -> None:
    world.out.mkdir()
    os.mkfifo(world.out / "result.json")
    os.mkfifo(world.io / "RESULT.md")

    answer = collect(world)  # a blocking open would hit the subprocess timeout

    assert answer == empty(["RESULT.md: a FIFO, skipped", "out/result.json: a FIFO, skipped"])


def test_links_fifos_and_sockets_among_the_artifacts_are_skipped_and_named(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(world.artifacts / "kept.txt", b"kept")
    (world.artifacts / "link").symlink_to(world.outside / "secret.txt")
    (world.artifacts / "relative-link").symlink_to("kept.txt")
    (world.artifacts / "dir-link").symlink_to(world.outside)
    os.mkfifo(world.artifacts / "pipe")
    monkeypatch.chdir(world.artifacts)  # a socket's path must be short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")

        answer = collect(world)

    assert answer["artifacts"] == [{"path": "kept.txt", "size": 4, "sha256": sha(b"kept")}]
    assert answer["warnings"] == [
        "out/artifacts/dir-link: a symbolic link, skipped",
        "out/artifacts/link: a symbolic link, skipped",
        "out/artifacts/pipe: a FIFO, skipped",
        "out/artifacts/relative-link: a symbolic link, skipped",
        "out/artifacts/sock: a socket, skipped",
    ]


IN_ACCESS = 0x1


def reads_of(path: Path) -> Callable[[], bool]:
    """Start watching ``path`` for reads (inotify IN_ACCESS); the returned callable says
    whether there was one since (and ends the watch)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, bytes(path), IN_ACCESS) >= 0

    def read_happened() -> bool:
        try:
            events = os.read(fd, 65536)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        masks, offset = [], 0
        while offset < len(events):  # struct inotify_event: wd, mask, cookie, len, name[len]
            _, mask, _, size = struct.unpack_from("iIII", events, offset)
            masks.append(mask)
            offset += 16 + size
        return any(mask & IN_ACCESS for mask in masks)

    return read_happened


def test_a_sparse_2_gib_artifact_is_listed_without_a_hash_and_never_read(world: World) -> None:
    write(world.artifacts / "small.bin", b"small")
    huge = world.artifacts / "huge.img"
    huge.touch()
    os.truncate(huge, 2 << 30)
    read_happened = reads_of(huge)
    started = time.monotonic()

    answer = collect(world, max_artifact=1 << 20)

    assert time.monotonic() - started < 10
    assert not read_happened()
    assert answer["artifacts"] == [
        {"path": "huge.img", "size": 2 << 30, "sha256": None},
        {"path": "small.bin", "size": 5, "sha256": sha(b"small")},
    ]


def test_the_watch_sees_a_read_when_there_is_one(world: World) -> None:
    """The inotify watch of the test above does see reads (so its silence means something)."""
    write(world.artifacts / "read-me", b"x" * 10)
    read_happened = reads_of(world.artifacts / "read-me")
    assert collect(world)["artifacts"] == [{"path": "read-me", "size": 10, "sha256": sha(b"x" * 10)}]
    assert read_happened()


def test_artifacts_deeper_than_32_levels_are_not_listed(world: World) -> None:
    deep = world.artifacts.joinpath(*["d"] * 40)
    write(deep / "bottom.txt", b"deep")
    write(world.artifacts.joinpath(*["d"] * 31) / "f", b"at 32")

    answer = collect(world)

    assert answer["artifacts"] == [{"path": "/".join(["d"] * 31 + ["f"]), "size": 5,
                                    "sha256": sha(b"at 32")}]  # fmt: skip
    assert answer["warnings"] == [
        "out/artifacts/%s: more than 32 levels deep, not listed" % "/".join(["d"] * 32)
    ]


def test_no_more_than_10000_entries_are_walked(world: World) -> None:
    world.artifacts.mkdir(parents=True)
    for i in range(10_050):
        (world.artifacts / f"f{i:05d}").touch()

    answer = collect(world)

    assert len(answer["artifacts"]) == 10_000  # type: ignore[arg-type]
    assert answer["warnings"] == ["out/artifacts: more than 10000 entries, the rest not listed"]


def test_an_artifact_whose_name_is_not_utf8_is_skipped_with_a_warning(world: World) -> None:
    world.artifacts.mkdir(parents=True)
    with open(os.fsencode(world.artifacts) + b"/bad-\xff", "wb") as f:
        f.write(b"x")

    answer = collect(world)

    assert answer["artifacts"] == []
    assert answer["warnings"] == ["out/artifacts/bad-\ufffd: a name that is not valid UTF-8, skipped"]


def test_collect_writes_nothing_in_the_agents_folder(world: World) -> None:
    write(world.artifacts / "a" / "b.txt", b"b")
    write(world.io / "RESULT.md", b"r")
    before = sorted((str(p), p.lstat().st_mode, p.lstat().st_mtime_ns) for p in world.io.rglob("*"))
    collect(world)
    after = sorted((str(p), p.lstat().st_mode, p.lstat().st_mtime_ns) for p in world.io.rglob("*"))
    assert after == before


@pytest.mark.parametrize("args", [[], ["collect", "{io}", "1"], ["collect", "relative", "1", "1"],
                                  ["collect", "{io}", "-1", "1"], ["nope", "{io}", "1", "1"]])  # fmt: skip
def test_bad_arguments_exit_2(world: World, args: list[str]) -> None:
    proc = exchange(*[a.replace("{io}", str(world.io)) for a in args])
    assert proc.returncode == 2 and proc.stdout == b"" and proc.stderr.strip()


# read -----------------------------------------------------------------------------------------


def test_read_writes_the_artifacts_bytes(world: World) -> None:
    data = bytes(range(256)) * 100
    write(world.artifacts / "dist" / "app.bin", data)

    proc = exchange("read", world.io, "dist/app.bin", len(data))

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == data


@pytest.mark.parametrize("rel", ["../x", "dist/../../x", "/etc/passwd", "./dist/app.bin", ""])
def test_read_refuses_a_path_that_is_not_clean_with_2(world: World, rel: str) -> None:
    write(world.artifacts / "dist" / "app.bin", b"app")
    proc = exchange("read", world.io, rel, BIG)
    assert proc.returncode == 2 and proc.stdout == b"" and proc.stderr.strip()


@pytest.mark.parametrize("case", ["link", "folder link", "io link", "missing", "fifo", "folder"])
def test_read_refuses_a_link_a_missing_file_or_a_special_file_with_3(
    world: World, case: str
) -> None:
    world.artifacts.mkdir(parents=True)
    io = world.io
    if case == "link":
        (world.artifacts / "x").symlink_to(world.outside / "secret.txt")
        rel = "x"
    elif case == "folder link":
        (world.artifacts / "d").symlink_to(world.outside / "out" / "artifacts")
        rel = "d/secret.txt"
    elif case == "io link":
        io = world.home / "io-link"
        io.symlink_to(world.outside)
        rel = "secret.txt"
    elif case == "fifo":
        os.mkfifo(world.artifacts / "x")
        rel = "x"
    elif case == "folder":
        (world.artifacts / "x").mkdir()
        rel = "x"
    else:
        rel = "x"

    proc = exchange("read", io, rel, BIG)

    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == b"" and proc.stderr.strip()


def test_read_of_a_file_over_the_cap_exits_4_without_output(world: World) -> None:
    write(world.artifacts / "big.bin", b"x" * 101)
    proc = exchange("read", world.io, "big.bin", 100)
    assert proc.returncode == 4 and proc.stdout == b"" and b"over 100" in proc.stderr
    assert exchange("read", world.io, "big.bin", 101).stdout == b"x" * 101


# progress -------------------------------------------------------------------------------------


def progress(world: World, cursor: int, max_bytes: int = BIG) -> dict[str, object]:
    proc = exchange("progress", world.io, cursor, max_bytes)
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, object] = json.loads(proc.stdout)
    return answer


def test_progress_returns_complete_lines_only_and_advances_the_cursor(world: World) -> None:
    log = world.out / "progress.jsonl"
    write(log, b'{"message": "one"}\n{"message": "two"}\n{"message": "th')

    first = progress(world, 0)
    assert first == {"size": 53, "cursor": 38,
                     "lines": ['{"message": "one"}', '{"message": "two"}']}  # fmt: skip
    assert progress(world, 38) == {"size": 53, "cursor": 38, "lines": []}

    with log.open("ab") as f:
        f.write(b'ree"}\n')
    assert progress(world, 38) == {"size": 59, "cursor": 59, "lines": ['{"message": "three"}']}


def test_progress_reads_at_most_max_bytes_up_to_the_last_newline(world: World) -> None:
    write(world.out / "progress.jsonl", b"aaaa\nbbbb\ncccc\n")

    assert progress(world, 0, max_bytes=12) == {"size": 15, "cursor": 10, "lines": ["aaaa", "bbbb"]}
    assert progress(world, 10, max_bytes=12) == {"size": 15, "cursor": 15, "lines": ["cccc"]}


def test_a_progress_line_longer_than_max_bytes_is_skipped_not_stuck_on(world: World) -> None:
    write(world.out / "progress.jsonl", b"x" * 30 + b"\nok\n")
    skipped = progress(world, 0, max_bytes=10)
    assert skipped["cursor"] == 10 and skipped["lines"] == []
    cursor = 10
    for _ in range(5):
        step = progress(world, cursor, max_bytes=10)
        if step["lines"]:
            break
        cursor = step["cursor"]  # type: ignore[assignment]
    assert step["lines"][-1] == "ok"  # type: ignore[index]


def test_progress_restarts_from_0_after_the_file_shrank(world: World) -> None:
    write(world.out / "progress.jsonl", b"old line 1\nold line 2\n")
    assert progress(world, 0)["cursor"] == 22

    write(world.out / "progress.jsonl", b"new\n")

    assert progress(world, 22) == {"size": 4, "cursor": 4, "lines": ["new"]}


def test_progress_of_a_missing_or_linked_file_is_empty(world: World) -> None:
    assert progress(world, 0) == {"size": 0, "cursor": 0, "lines": []}
    world.out.mkdir()
    (world.out / "progress.jsonl").symlink_to(world.outside / "secret.txt")

    proc = exchange("progress", world.io, 0, BIG)

    assert json.loads(proc.stdout) == {"size": 0, "cursor": 0, "lines": []}
    assert b"out/progress.jsonl: a symbolic link" in proc.stderr

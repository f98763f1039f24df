"""hangar.agent.commands: the signed command channel between the control plane and a live
turn's driver, on plain folders (no sandbox)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hangar.agent import commands
from hangar.agent.commands import Inbox, NotLanded, read_acks, write_command

RUN = "run_cmd1"
KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


@pytest.fixture
def ctl(tmp_path: Path) -> str:
    folder = tmp_path / "ctl"
    commands.create(str(folder))
    return str(folder)


def answers(ctl: str) -> list[dict[str, Any]]:
    batch = read_acks(ctl, KEY, RUN, 0)
    assert batch.ignored == 0
    return list(batch.answers)


def place(ctl: str, name: str, data: bytes) -> None:
    """Put a file into in/ as hangar's user could, bypassing write_command."""
    Path(ctl, "in", name).write_bytes(data)


def signed(fields: dict[str, Any], key: bytes = KEY, run: str = RUN) -> bytes:
    mac = commands.sign(key, commands.COMMAND_TAG, run, fields)
    return json.dumps(dict(fields, mac=mac)).encode()


def test_a_written_command_is_taken_once_with_its_body(ctl: str) -> None:
    path = write_command(ctl, KEY, RUN, 1, "steer", {"message": "use tabs"})
    assert Path(path).parent == Path(ctl, "in")
    inbox = Inbox(ctl, KEY, RUN)
    taken = inbox.take()
    assert [(c.seq, c.kind, c.body) for c in taken] == [(1, "steer", {"message": "use tabs"})]
    assert inbox.take() == []
    assert os.listdir(Path(ctl, "in")) == [] and os.listdir(Path(ctl, "tmp")) == []
    assert answers(ctl) == []


def test_commands_are_taken_in_seq_order_whatever_the_order_they_land_in(ctl: str) -> None:
    inbox = Inbox(ctl, KEY, RUN)
    write_command(ctl, KEY, RUN, 3, "interrupt", {})
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    write_command(ctl, KEY, RUN, 2, "steer", {"message": "b"})
    assert [c.seq for c in inbox.take()] == [1, 2, 3]
    write_command(ctl, KEY, RUN, 5, "steer", {"message": "e"})
    assert inbox.take() == []  # held until 4 lands
    write_command(ctl, KEY, RUN, 4, "steer", {"message": "d"})
    assert [c.body["message"] for c in inbox.take()] == ["d", "e"]
    assert answers(ctl) == []


def test_a_gap_left_by_a_command_that_never_landed_is_given_up_after_a_while(
    ctl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(commands.time, "monotonic", lambda: now[0])
    inbox = Inbox(ctl, KEY, RUN)
    write_command(ctl, KEY, RUN, 2, "steer", {"message": "b"})
    assert inbox.take() == []  # held for 1
    now[0] += commands.GAP_SECONDS + 1
    assert [c.seq for c in inbox.take()] == [2]
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})  # too late: refused
    assert inbox.take() == []
    assert [(a["seq"], a["detail"]) for a in answers(ctl)] == [(1, "replayed")]


def test_an_answer_is_read_once_and_the_offset_moves_past_it(ctl: str) -> None:
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    inbox = Inbox(ctl, KEY, RUN)
    (command,) = inbox.take()
    inbox.answer(command, "delivered", "")
    first = read_acks(ctl, KEY, RUN, 0)
    assert first.answers == [{"seq": 1, "id": command.id, "status": "delivered", "detail": ""}]
    assert read_acks(ctl, KEY, RUN, first.offset) == ([], first.offset, 0)


BAD = {
    "unsigned": lambda: json.dumps({"seq": 1, "kind": "steer", "id": "x1", "body": {},
                                    "mac": ""}).encode(),  # fmt: skip
    "forged": lambda: signed({"seq": 1, "kind": "steer", "id": "x1", "body": {}}, OTHER_KEY),
    "other run": lambda: signed({"seq": 1, "kind": "steer", "id": "x1", "body": {}},
                                run="run_other"),  # fmt: skip
    "malformed": lambda: b'{"seq": 1, "kind": "steer"',
    "unknown kind": lambda: signed({"seq": 1, "kind": "rm -rf", "id": "x1", "body": {}}),
    "oversized": lambda: b" " * (commands.MAX_COMMAND + 1),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_command_is_refused_with_a_signed_refusal_and_changes_nothing(
    ctl: str, case: str
) -> None:
    place(ctl, "1.json", BAD[case]())
    inbox = Inbox(ctl, KEY, RUN)
    assert inbox.take() == []
    (refusal,) = answers(ctl)
    assert refusal["status"] == "refused" and refusal["seq"] is None
    assert os.listdir(Path(ctl, "in")) == []
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "real"})
    assert [c.body for c in inbox.take()] == [{"message": "real"}]


def test_an_oversized_command_is_refused_without_being_read(
    ctl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "MAX_COMMAND", 4096)
    place(ctl, "1.json", b"x" * (commands.MAX_COMMAND + 1))
    reads: list[int] = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    assert Inbox(ctl, KEY, RUN).take() == []
    assert reads == []
    assert "oversized" in answers(ctl)[0]["detail"]


def test_a_link_in_the_inbox_is_refused_and_not_followed(ctl: str, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_bytes(signed({"seq": 1, "kind": "steer", "id": "x1", "body": {}}))
    os.symlink(target, Path(ctl, "in", "1.json"))
    assert Inbox(ctl, KEY, RUN).take() == []
    assert "not a file" in answers(ctl)[0]["detail"]
    assert target.exists()


def test_a_replayed_command_is_refused_by_seq_or_by_id_and_changes_nothing(ctl: str) -> None:
    inbox = Inbox(ctl, KEY, RUN)
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    write_command(ctl, KEY, RUN, 2, "steer", {"message": "b"})
    first, second = inbox.take()
    copies = {
        "same seq and id": {"seq": 2, "kind": "steer", "id": second.id, "body": {"message": "b"}},
        "lower seq": {"seq": 1, "kind": "steer", "id": "fresh-id", "body": {"message": "x"}},
        "same id": {"seq": 3, "kind": "steer", "id": first.id, "body": {"message": "a"}},
    }
    for name, fields in copies.items():
        place(ctl, name + ".json", signed(fields))
    assert inbox.take() == []
    refusals = answers(ctl)
    assert sorted((a["seq"], a["status"], a["detail"]) for a in refusals) == [
        (1, "refused", "replayed"), (2, "refused", "replayed"), (3, "refused", "replayed")]
    write_command(ctl, KEY, RUN, 3, "interrupt", {})
    assert [(c.seq, c.kind) for c in inbox.take()] == [(3, "interrupt")]


def test_an_answer_not_signed_by_the_runs_key_is_ignored(ctl: str) -> None:
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    (command,) = Inbox(ctl, KEY, RUN).take()
    Inbox(ctl, OTHER_KEY, RUN).answer(command, "delivered", "forged")
    Inbox(ctl, KEY, "run_other").answer(command, "delivered", "other run")
    with open(Path(ctl, "acks"), "ab") as f:
        f.write(b"not json\n")
    Inbox(ctl, KEY, RUN).answer(command, "turn_ended", "real")
    batch = read_acks(ctl, KEY, RUN, 0)
    assert [a["detail"] for a in batch.answers] == ["real"]
    assert batch.ignored == 3
    assert batch.offset == Path(ctl, "acks").stat().st_size


def test_a_line_still_being_written_is_left_for_the_next_read(ctl: str) -> None:
    line = json.dumps({"seq": 1, "id": "x", "status": "delivered", "detail": "",
                       "mac": commands.sign(KEY, commands.ACK_TAG, RUN, {
                           "seq": 1, "id": "x", "status": "delivered", "detail": ""})})  # fmt: skip
    Path(ctl, "acks").write_text(line)
    assert read_acks(ctl, KEY, RUN, 0) == ([], 0, 0)
    with open(Path(ctl, "acks"), "a") as f:
        f.write("\n")
    assert [a["id"] for a in read_acks(ctl, KEY, RUN, 0).answers] == ["x"]


def test_a_commands_mac_does_not_verify_as_an_answer(ctl: str) -> None:
    path = write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    command = json.loads(Path(path).read_text())
    fields = {"seq": 1, "id": command["id"], "status": "delivered", "detail": ""}
    # the same fields under the command's tag: a signature hangar made, replayed as an answer
    line = dict(fields, mac=commands.sign(KEY, commands.COMMAND_TAG, RUN, fields))
    Path(ctl, "acks").write_text(json.dumps(line) + "\n")
    assert read_acks(ctl, KEY, RUN, 0).answers == []
    fields = {k: command[k] for k in commands.FIELDS}
    assert not commands.verify(KEY, commands.ACK_TAG, RUN, fields, command["mac"])
    assert commands.verify(KEY, commands.COMMAND_TAG, RUN, fields, command["mac"])


def test_after_close_a_write_fails_at_once_and_what_landed_is_returned_exactly_once(
    ctl: str,
) -> None:
    inbox = Inbox(ctl, KEY, RUN)
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "taken"})
    assert [c.seq for c in inbox.take()] == [1]
    write_command(ctl, KEY, RUN, 3, "steer", {"message": "held"})
    assert inbox.take() == []
    write_command(ctl, KEY, RUN, 2, "steer", {"message": "late"})
    left = inbox.close()
    assert [(c.seq, c.body["message"]) for c in left] == [(2, "late"), (3, "held")]
    with pytest.raises(NotLanded) as failed:
        write_command(ctl, KEY, RUN, 4, "steer", {"message": "too late"})
    assert failed.value.code == "turn_ended"
    assert os.listdir(Path(ctl, "tmp")) == []
    assert sorted(os.listdir(ctl)) == ["tmp"]
    assert inbox.close() == [] and inbox.take() == []
    for command in left:
        inbox.answer(command, "turn_ended", "")
    assert [(a["seq"], a["status"]) for a in answers(ctl)] == [(2, "turn_ended"),
                                                               (3, "turn_ended")]  # fmt: skip


def test_a_second_driver_closing_after_a_crash_drains_what_the_first_left(ctl: str) -> None:
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "a"})
    os.rename(Path(ctl, "in"), Path(ctl, "in.closed"))  # the first died after its rename
    assert [c.seq for c in Inbox(ctl, KEY, RUN).close()] == [1]
    assert sorted(os.listdir(ctl)) == ["tmp"]


def test_a_write_into_a_landed_seq_does_not_replace_it(ctl: str) -> None:
    write_command(ctl, KEY, RUN, 1, "steer", {"message": "first"})
    with pytest.raises(FileExistsError):
        write_command(ctl, KEY, RUN, 1, "steer", {"message": "second"})
    assert [c.body["message"] for c in Inbox(ctl, KEY, RUN).take()] == ["first"]
    assert os.listdir(Path(ctl, "tmp")) == []


LOAD_KEY = """
import ctypes, json, sys
sys.path[:0] = [sys.argv[1]]
from hangar.agent import commands
before = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
key = commands.load_key(sys.argv[2])
after = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
print(json.dumps({"key": key.hex(), "before": before, "after": after,
                  "modules": sorted(m for m in sys.modules if m.startswith(("hangar", "site")))}))
"""


def test_load_key_in_an_isolated_python_deletes_the_file_and_leaves_the_process_undumpable(
    tmp_path: Path,
) -> None:
    lib = tmp_path / "lib"
    (lib / "hangar" / "agent").mkdir(parents=True)
    (lib / "hangar" / "__init__.py").write_text("")
    (lib / "hangar" / "agent" / "__init__.py").write_text("")
    shutil.copy(str(commands.__file__), lib / "hangar" / "agent" / "commands.py")
    key = commands.new_key()
    path = tmp_path / "key"
    path.write_bytes(key)
    python = shutil.which("python3", path="/usr/bin") or sys.executable
    done = subprocess.run([python, "-I", "-S", "-c", LOAD_KEY, str(lib), str(path)],
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    assert out == {"key": key.hex(), "before": 1, "after": 0,
                   "modules": ["hangar", "hangar.agent", "hangar.agent.commands"]}  # fmt: skip
    assert not path.exists()


def test_a_key_file_of_the_wrong_size_is_refused_and_still_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Made undumpable, this test runner could not be debugged; the prctl is checked above.
    monkeypatch.setattr(commands, "undumpable", lambda: None)
    path = tmp_path / "key"
    path.write_bytes(b"short")
    with pytest.raises(commands.BadKey):
        commands.load_key(str(path))
    assert not path.exists()
    with pytest.raises(commands.BadKey):
        commands.load_key(str(path))


def test_a_command_landing_in_the_renamed_folder_during_close_is_still_returned(
    ctl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = Inbox(ctl, KEY, RUN)
    late = signed({"seq": 1, "kind": "steer", "id": "late1", "body": {"message": "late"}})
    real_rmdir = os.rmdir
    landed: list[str] = []

    def rmdir_after_a_late_link(path: str) -> None:
        # a link that looked up in/ before the rename lands after the first drain
        if not landed:
            landed.append(path)
            Path(path, "1.json").write_bytes(late)
        real_rmdir(path)

    monkeypatch.setattr(os, "rmdir", rmdir_after_a_late_link)
    assert [c.id for c in inbox.close()] == ["late1"]
    assert landed == [str(Path(ctl, "in.closed"))]
    assert sorted(os.listdir(ctl)) == ["tmp"]


def test_a_fifo_in_the_inbox_is_refused_without_blocking(ctl: str) -> None:
    os.mkfifo(Path(ctl, "in", "1.json"))
    assert Inbox(ctl, KEY, RUN).take() == []
    assert "not a file" in answers(ctl)[0]["detail"]
    assert os.listdir(Path(ctl, "in")) == []

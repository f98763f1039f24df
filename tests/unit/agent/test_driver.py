"""The steering driver's loop (:class:`hangar.agent.driver.Driver`) with a stand-in CLI and a
stand-in adapter: a steer that landed as the turn ended continues it; one the CLI never took
before it exited is answered ``turn_ended``; replies go to the log through the adapter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hangar.agent import commands
from hangar.agent.driver import Driver

KEY, RUN = b"k" * 32, "run-1"
# Answers each input line "say X" with "X" then "END"; exits at the end of its input, or
# at once after its first answer when told "once".
CLI = r"""
import sys
once = sys.argv[1:] == ["once"]
for line in sys.stdin:
    print(line.split(" ", 1)[1].strip(), flush=True)
    if once:
        sys.exit(3)
    print("END", flush=True)
"""


class Adapter:
    """Says the message; steers only after the CLI's turn ended (as follow-ups)."""

    def __init__(self) -> None:
        self.idle, self.failure, self.interrupted = False, None, False

    def begin(self, message: str) -> list[bytes]:
        return [f"say {message}\n".encode()]

    def output(self, line: bytes) -> tuple[list[bytes], list[bytes]]:
        if line == b"END":
            self.idle = True
        return [line + b"\n"], []

    def steer(self, text: str) -> None:
        return None  # never mid-turn: it waits for the turn's end

    def follow_up(self, text: str) -> list[bytes]:
        self.idle = False
        return [f"say {text}\n".encode()]

    def interrupt(self) -> list[bytes]:
        return []


def drive(ctl: Path, *argv: str) -> tuple[int, list[dict[str, object]]]:
    cli = subprocess.Popen([sys.executable, "-c", CLI, *argv], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)  # fmt: skip
    driver = Driver(Adapter(), commands.Inbox(str(ctl), KEY, RUN), cli)
    driver.run("hello")
    if not driver.gone:
        assert cli.stdin is not None
        cli.stdin.close()
    code = cli.wait()
    answers = commands.read_acks(str(ctl), KEY, RUN, 0).answers
    return code, answers


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    folder = tmp_path / "ctl"
    commands.create(str(folder))
    return folder


def test_a_steer_that_landed_as_the_turn_ended_continues_the_turn(
    ctl: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    commands.write_command(str(ctl), KEY, RUN, 1, "steer", {"message": "also this"})
    code, answers = drive(ctl)
    assert code == 0
    assert [(a["seq"], a["status"]) for a in answers] == [(1, "delivered")]
    assert capfd.readouterr().out.split() == ["hello", "END", "also", "this", "END"]
    with pytest.raises(commands.NotLanded):  # the inbox is closed: hangar knows at once
        commands.write_command(str(ctl), KEY, RUN, 2, "steer", {"message": "late"})


def test_a_steer_the_cli_never_took_is_answered_turn_ended_when_it_exits(
    ctl: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    commands.write_command(str(ctl), KEY, RUN, 1, "steer", {"message": "too late"})
    code, answers = drive(ctl, "once")
    assert code == 3
    assert [(a["seq"], a["status"]) for a in answers] == [(1, "turn_ended")]
    assert capfd.readouterr().out.split() == ["hello"]


def test_claude_code_asking_to_use_a_tool_becomes_one_approval_decided_once() -> None:
    from hangar.agent.claudelive import ClaudeLive
    import json

    claude = ClaudeLive({})
    ask = {"type": "control_request", "request_id": "r1",
           "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}}}
    assert claude.output(json.dumps(ask, separators=(",", ":")).encode()) == ([], [])
    assert claude.asks == [{"id": "r1", "tool": "Bash", "input": {"command": "ls"}}]
    (line,) = claude.decide("r1", True) or []
    response = json.loads(line)["response"]
    assert response["request_id"] == "r1"
    assert response["response"] == {"behavior": "allow", "updatedInput": {"command": "ls"}}
    assert claude.decide("r1", False) is None  # decided already
    other = {"type": "control_request", "request_id": "r2", "request": {"subtype": "mcp_message"}}
    log, send = claude.output(json.dumps(other, separators=(",", ":")).encode())
    assert log == [] and json.loads(send[0])["response"]["subtype"] == "error"


def test_only_lines_the_driver_signed_verify_as_its_own() -> None:
    import json

    fields = {"type": "hangar.approval", "id": "r1", "tool": "Bash", "input": {}}
    line = json.loads(commands.signed_event(KEY, RUN, fields))
    assert commands.verify_event(KEY, RUN, line) == fields
    assert commands.verify_event(KEY, "run-2", line) is None  # another run's
    assert commands.verify_event(b"x" * 32, RUN, line) is None  # another key's
    assert commands.verify_event(KEY, RUN, {**line, "tool": "Write"}) is None  # altered
    assert commands.verify_event(KEY, RUN, fields) is None  # unsigned, as a CLI could print it


def test_codex_asking_to_run_a_command_becomes_one_approval_only_when_the_turn_asks() -> None:
    import json

    from hangar.agent.codexlive import CodexLive

    ask = {"id": 7, "method": "item/commandExecution/requestApproval",
           "params": {"threadId": "t", "turnId": "u", "command": "rm x", "cwd": "/w"}}
    raw = json.dumps(ask).encode()
    asking = CodexLive({"asks": True})
    assert asking.output(raw) == ([], [])
    assert asking.asks == [{"id": "codex-7", "tool": "commandExecution",
                            "input": {"command": "rm x", "cwd": "/w"}}]
    (line,) = asking.decide("codex-7", False) or []
    assert json.loads(line) == {"id": 7, "result": {"decision": "decline"}}
    assert asking.decide("codex-7", True) is None  # decided already
    _, answered = CodexLive({}).output(raw)  # a turn that does not ask: declined at once
    assert json.loads(answered[0])["result"] == {"decision": "decline"}

"""hangar/agent/pirpc.py run as a turn's command is (``agent.command("pirpc", *PI_ARGV)``),
against a stand-in for pi's RPC mode that does what pi 0.73.1 does (answers and events as JSON
lines, ``id`` and ``type`` first; a retry's event right after the ``agent_end`` it follows; the
session ends when its input does) and records every command it reads: the message goes to pi
exactly, and the session ends once the turn has, never at an ``agent_end`` a retry follows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import installed_scripts as scripts

STANDIN = r'''
import json, sys

script, record = sys.argv[1], sys.argv[2]

def out(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()

def note(what):
    with open(record, "a") as f:
        f.write(json.dumps(what) + "\n")

def answer(command, **more):
    out({"id": command.get("id"), "type": "response", "command": command["type"],
         "success": True, **more})

def end(text, error=None):
    message = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    if error:
        message.update(stopReason="error", errorMessage=error)
    out({"type": "agent_end", "messages": [message]})

for line in sys.stdin:
    command = json.loads(line)
    note(command)
    if command["type"] == "get_state":
        answer(command, data={"sessionId": "s-1", "isStreaming": False})
    elif command["type"] == "prompt" and script == "refuse":
        out({"id": command["id"], "type": "response", "command": "prompt", "success": False,
             "error": "No API key found"})
    elif command["type"] == "prompt":
        answer(command)
        out({"type": "agent_start"})
        if script == "crash":
            sys.exit(0)
        # a line far longer than one read, as a whole turn's agent_end is
        out({"type": "message_update", "delta": "x" * 300000})
        if script == "retry":
            end("", error="503 overloaded")
            out({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3})
            note("retrying")
            continue
        end("Done.")
    if script == "retry" and command["type"] == "get_state" and command["id"] == "hangar-settled":
        script = "retried"
        end("Done after a retry.")
note("end of input")
'''


Done = subprocess.CompletedProcess[bytes]


def drive(tmp_path: Path, script: str, message: str = "go") -> tuple[Done, list[Any]]:
    """The driver over the stand-in playing ``script``: its process, and what the stand-in
    read (commands, and its notes), in order."""
    standin = tmp_path / "pi.py"
    standin.write_text(STANDIN)
    record = tmp_path / "record.jsonl"
    done = subprocess.run(scripts.command("pirpc", sys.executable, str(standin), script,
                                        str(record)), input=message.encode(),
                          capture_output=True, timeout=60)  # fmt: skip
    seen = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return done, seen


def events(output: bytes) -> list[str]:
    return [json.loads(line)["type"] for line in output.splitlines()]


def test_the_message_reaches_pi_exactly_and_the_session_ends_once_the_turn_has(
    tmp_path: Path,
) -> None:
    message = "\n\n  - fix the typo\n--help\n\tcafé 🚀 \\n \"quoted\" \u2028 end  \n\n"
    done, seen = drive(tmp_path, "plain", message)
    assert done.returncode == 0, done.stderr
    assert seen == [
        {"id": "hangar-state", "type": "get_state"},
        {"id": "hangar-prompt", "type": "prompt", "message": message},
        {"id": "hangar-settled", "type": "get_state"},
        "end of input",
    ]
    assert events(done.stdout) == ["response", "response", "agent_start", "message_update",
                                   "agent_end", "response"]  # fmt: skip
    assert json.loads(done.stdout.splitlines()[0])["data"]["sessionId"] == "s-1"


def test_an_agent_end_that_a_retry_follows_does_not_end_the_session(tmp_path: Path) -> None:
    done, seen = drive(tmp_path, "retry")
    assert done.returncode == 0, done.stderr
    assert [s if isinstance(s, str) else s["id"] for s in seen] == [
        "hangar-state", "hangar-prompt", "retrying", "hangar-settled", "hangar-settled",
        "end of input"]  # fmt: skip
    ends = [json.loads(line) for line in done.stdout.splitlines() if b'"agent_end"' in line]
    assert [e["messages"][0]["content"][0]["text"] for e in ends] == ["", "Done after a retry."]


def test_a_refused_prompt_ends_the_session_with_status_1(tmp_path: Path) -> None:
    done, seen = drive(tmp_path, "refuse")
    assert done.returncode == 1
    assert b"pi refused the prompt" in done.stderr
    assert seen[-1] == "end of input" and len(seen) == 3
    assert b"No API key found" in done.stdout  # the adapter reads the reason from the log


def test_pi_ending_before_its_turn_did_is_status_1(tmp_path: Path) -> None:
    done, _ = drive(tmp_path, "crash")
    assert done.returncode == 1
    assert done.stderr.endswith(b"hangar: pi ended before its turn did\n")
    assert events(done.stdout) == ["response", "response", "agent_start"]


def test_a_pi_that_cannot_be_started_is_status_127_saying_why() -> None:
    done = subprocess.run(scripts.command("pirpc", "no-such-pi-here", "--mode", "rpc"),
                          input=b"go", capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 127
    assert b"cannot start no-such-pi-here" in done.stderr and b"No such file" in done.stderr

"""Which run-log lines end a step that may change the working tree, and the files it names."""

from __future__ import annotations

import json

from hangar.agent.steps import Steps


def line(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def claude_call(call_id: str, name: str, given: dict[str, object]) -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": given}
    return line({"type": "assistant", "message": {"content": [block]}})


def claude_result(call_id: str) -> bytes:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}
    return line({"type": "user", "message": {"content": [block]}})


def test_claude_codes_edit_and_shell_results_end_steps_and_reads_do_not() -> None:
    steps = Steps()
    assert steps.see(claude_call("1", "Write", {"file_path": "/w/a.py"})) == []
    assert steps.see(claude_call("2", "Read", {"file_path": "/w/b.py"})) == []
    assert steps.see(claude_call("3", "Bash", {"command": "make"})) == []
    assert steps.see(claude_result("1")) == [("Write", ["/w/a.py"])]
    assert steps.see(claude_result("2")) == []  # a read changes nothing
    assert steps.see(claude_result("3")) == [("Bash", None)]  # the whole tree
    assert steps.see(claude_result("3")) == []  # once


def test_codexs_file_changes_and_commands_end_steps() -> None:
    steps = Steps()
    change = {"type": "file_change", "changes": [{"path": "/w/a.py", "kind": "update"}]}
    assert steps.see(line({"type": "item.completed", "item": change})) == [
        ("fileChange", ["/w/a.py"])]  # fmt: skip
    command = {"type": "command_execution", "command": "ls"}
    assert steps.see(line({"type": "item.completed", "item": command})) == [
        ("commandExecution", None)]  # fmt: skip
    message = {"type": "agent_message", "text": "hi"}
    assert steps.see(line({"type": "item.completed", "item": message})) == []


def test_other_and_broken_lines_end_no_step() -> None:
    steps = Steps()
    assert steps.see(b'{"type":"user","message":') == []
    assert steps.see(b"not json") == []
    assert steps.see(line({"type": "result"})) == []

"""What the CLI shows without a server: progress lines for each harness's events, relative
times, usage errors, and a port that is taken."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hangar.cli.follow import Progress
from hangar.cli.render import ago, describe_event
from tests.cli.conftest import Cli


def line(event: object) -> bytes:
    return json.dumps(event).encode() + b"\n"


def test_progress_lines_name_tool_calls_and_the_agents_text() -> None:
    claude = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]}}  # fmt: skip
    codex = {"type": "item.completed",
             "item": {"type": "command_execution", "command": "bash -lc ls"}}  # fmt: skip
    pi = {"type": "tool_execution_start", "toolName": "bash", "args": {"command": "ls"}}
    agy = {"type": "message", "role": "assistant", "content": "Done."}
    assert describe_event(line(claude)) == 'tool Bash: {"command": "ls"}'
    assert describe_event(line(codex)) == "ran: bash -lc ls"
    assert describe_event(line(pi)) == 'tool bash: {"command": "ls"}'
    assert describe_event(line(agy)) == "Done."
    assert describe_event(line({"type": "init", "session_id": "x"})) is None
    assert describe_event(b"plain output from a tool\n") == "plain output from a tool"
    assert describe_event(b"\n") is None
    assert len(describe_event(b"x" * 500) or "") == 100


def test_model_api_retries_show_with_their_reason_for_each_harness() -> None:
    claude = {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 10,
              "retry_delay_ms": 1168.2, "error_status": 529, "error": "overloaded"}  # fmt: skip
    codex = {"type": "error", "message": "Reconnecting... waiting for network (Connection failed)"}
    pi = {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000,
          "errorMessage": "Connection error."}  # fmt: skip
    assert describe_event(line(claude)) == "model API retry 2/10 in 1.2 s: HTTP 529: overloaded"
    assert describe_event(line(codex)) == (
        "model API: Reconnecting... waiting for network (Connection failed)")  # fmt: skip
    assert describe_event(line(pi)) == (
        "model API retry 1/3 in 2.0 s: Connection error. (no HTTP answer: refused, not found or "
        "unreachable)")  # fmt: skip


def test_a_model_api_retry_names_its_cause_not_unknown() -> None:
    # As Claude Code 2.1.197, Codex 0.171.0 and pi 0.73.1 print them: nothing listening on the
    # endpoint, then an endpoint answering 503 or 502.
    claude_refused = {"type": "system", "subtype": "api_retry", "attempt": 10,
                      "max_retries": 10, "retry_delay_ms": 32000.0, "error_status": None,
                      "error": "unknown"}  # fmt: skip
    claude_502 = {**claude_refused, "attempt": 1, "retry_delay_ms": 556.2,
                  "error_status": 502, "error": "server_error"}  # fmt: skip
    claude_401 = {**claude_502, "error_status": 401, "error": "authentication_failed"}
    codex_503 = {"type": "error", "message": "Reconnecting... 1/5 (unexpected status 503 Service "
                 "Unavailable: stub outage, url: http://127.0.0.1:8787/v1/responses)"}  # fmt: skip
    pi_502 = {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000,
              "errorMessage": "502 <html>bad gateway</html>"}  # fmt: skip
    refused = describe_event(line(claude_refused)) or ""
    assert refused.startswith("model API retry 10/10 in 32.0 s: no HTTP answer (connection "
                              "refused, host unreachable or timed out")  # fmt: skip
    assert "unknown" not in refused
    assert describe_event(line(claude_502)) == (
        "model API retry 1/10 in 0.6 s: HTTP 502: server error")  # fmt: skip
    assert describe_event(line(claude_401)) == (
        "model API retry 1/10 in 0.6 s: HTTP 401: authentication failed")  # fmt: skip
    assert describe_event(line(codex_503)) == (
        "model API retry 1/5: HTTP 503 Service Unavailable: stub outage")  # fmt: skip
    assert describe_event(line(pi_502)) == (
        "model API retry 1/3 in 2.0 s: HTTP 502: <html>bad gateway</html>")  # fmt: skip


def test_the_agents_last_text_is_not_shown_again_when_it_is_the_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = {"type": "message", "role": "assistant", "content": "Working on it."}
    final = {"type": "message", "role": "assistant", "content": "All done."}
    tool = {"type": "tool_execution_start", "toolName": "bash", "args": {"command": "ls"}}
    progress = Progress()
    for event in (text, tool, final):
        progress.line(line(event))
    progress.end("All done.")
    shown = capsys.readouterr().err.splitlines()
    assert shown == ["  Working on it.", '  tool bash: {"command": "ls"}']
    other = Progress()
    other.line(line(final))
    other.end("A different summary.")
    assert capsys.readouterr().err == "  All done.\n"


def test_times_read_as_how_long_ago() -> None:
    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    assert ago((now - timedelta(seconds=5)).isoformat(), now) == "just now"
    assert ago((now - timedelta(minutes=7)).isoformat(), now) == "7 min ago"
    assert ago((now - timedelta(hours=3)).isoformat(), now) == "3 h ago"
    assert ago((now - timedelta(days=2)).isoformat(), now) == "2 d ago"
    assert ago(None) == "-"


def test_usage_errors_are_one_line_and_exit_2(cli: Cli) -> None:
    for argv in (["session"], ["session", "fork", "x", "many"], ["nonsense"]):
        code, out, err = cli(*argv)
        assert (code, out) == (2, ""), argv
        assert len(err.splitlines()) == 1 and err.endswith("(usage)\n"), err


def test_serve_on_a_taken_port_says_so_in_one_line(cli: Cli, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("serve", "--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert code == 1 and err.startswith(f"hangar: cannot listen on 127.0.0.1:{port}")
    assert len(err.splitlines()) == 1 and not (tmp_path / "data").exists()

"""What a pending approval shows of a tool's input: one redacted, bounded line."""

from __future__ import annotations

from hangar.sessions.approvals import SUMMARY_CHARS, summary_of


def test_a_command_is_shown_on_one_line_with_its_secrets_redacted() -> None:
    token = "ghp_" + "a1" * 18
    shown = summary_of("Bash", {"command": f'curl -H "Authorization: Bearer {token}"\n  https://x'})
    assert token not in shown and "[redacted]" in shown
    assert "\n" not in shown and shown.startswith("Bash: curl")


def test_a_file_tool_shows_its_path_and_codex_its_command_words() -> None:
    assert summary_of("Write", {"file_path": "/w/a.py", "content": "x"}) == "Write: /w/a.py"
    assert summary_of("commandExecution", {"command": ["bash", "-lc", "ls -la"]}) == (
        "commandExecution: bash -lc ls -la")  # fmt: skip


def test_a_long_input_is_cut() -> None:
    assert len(summary_of("Bash", {"command": "y" * 5000})) <= len("Bash: ") + SUMMARY_CHARS

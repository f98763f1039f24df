"""A run log said as the transcript's events, the same for every harness. The logs in
``transcripts/`` are real: each is the run log of one turn of the real CLI in a local sandbox
against the model stub, with the scenario ``{"when": "transcript", "steps": [{"shell": "echo
hello-out && ls"}, {"shell": "echo bad >&2; exit 3"}, {"text": "All done."}]}`` and the message
"transcript: run two commands" (captured with ``tests/harness``'s ``agent`` fixture:
``start_turn`` then ``wait_run``): Claude Code and Codex as live turns (hangar's driver, whose
signed ``hangar.tree`` line is among them), Codex and pi as one-shot turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangar.harnesses.transcript import OUTPUT_MAX, line_events, usage_event

LOGS = Path(__file__).parent / "transcripts"
PROMPT = "transcript: run two commands"


def events(name: str) -> list[dict[str, object]]:
    return [e.model_dump() for line in (LOGS / name).read_bytes().splitlines()
            for e in line_events(line)]  # fmt: skip


@pytest.mark.parametrize("log", ["claude-live.jsonl", "codex-exec.jsonl", "codex-live.jsonl",
                                 "pi-exec.jsonl"])  # fmt: skip
def test_each_clis_run_log_says_the_same_calls_results_and_answer(log: str) -> None:
    said = [e for e in events(log) if e["kind"] != "notice"]
    assert [e["kind"] for e in said] == ["tool_call", "tool_result", "tool_call", "tool_result",
                                         "message"]  # fmt: skip
    first, ok, second, failed, answer = said
    assert "echo hello-out && ls" in json.dumps(first["input"]) and first["id"] == ok["id"]
    assert ok["output"].startswith("hello-out\nREADME.md") and ok["error"] is False  # type: ignore[union-attr]
    assert "exit 3" in json.dumps(second["input"]) and second["id"] == failed["id"]
    assert "bad" in str(failed["output"]) and failed["error"] is True and not failed["cut"]
    assert answer == {"kind": "message", "role": "assistant", "text": "All done.", "context": []}
    assert PROMPT not in json.dumps(events(log))  # the CLI's echo of the prompt is not shown


def test_codex_warnings_are_notices_and_hangars_own_lines_say_nothing() -> None:
    (notice,) = [e for e in events("codex-exec.jsonl") if e["kind"] == "notice"]
    assert "Model metadata for `gpt-5-codex` not found" in str(notice["text"])
    tree = (LOGS / "claude-live.jsonl").read_bytes().splitlines()[0]
    assert b'"hangar.tree"' in tree and line_events(tree) == []
    assert line_events(b"[1, 2]") == [] and line_events(b'{"type": "turn.started"}') == []
    (words,) = line_events(b"a CLI's warning, not JSON")
    assert words.model_dump() == {"kind": "notice", "text": "a CLI's warning, not JSON"}


def test_a_long_output_is_cut_and_hangars_note_never_shows() -> None:
    result = {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "é" * OUTPUT_MAX}]}}
    (cut,) = line_events(json.dumps(result).encode())
    assert cut.model_dump()["cut"] is True
    assert len(cut.model_dump()["output"].encode()) <= OUTPUT_MAX
    echoed = {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "Done.\n\n<hangar-exchange>\nhangar: your exchange folder"}]}}
    (message,) = line_events(json.dumps(echoed).encode())
    assert message.model_dump()["text"] == "Done."
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
             "retry_delay_ms": 500, "error_status": 503, "error": "server_error"}
    (notice,) = line_events(json.dumps(retry).encode())
    assert notice.model_dump() == {"kind": "notice", "text": "model API retry 1/10 in 0.5 s: "
                                   "HTTP 503: server error"}  # fmt: skip


def test_each_harness_usage_counts_cached_input_among_the_input() -> None:
    claude = {"input_tokens": 10, "cache_read_input_tokens": 100,
              "cache_creation_input_tokens": 5, "output_tokens": 7}  # fmt: skip
    codex = {"input_tokens": 115, "cached_input_tokens": 100, "output_tokens": 7}
    pi = {"input": 10, "cacheRead": 100, "cacheWrite": 5, "output": 7, "totalTokens": 122}
    for usage, harness in ((claude, "claude"), (codex, "codex"), (pi, "pi")):
        counted = usage_event(usage, harness)
        assert counted is not None
        assert counted.model_dump() == {"kind": "usage", "input_tokens": 115,
                                        "output_tokens": 7, "cached_tokens": 100}, harness
    assert usage_event({}, "claude") is None

"""The adapters' command lines and outcome checks, from recorded CLI output."""

from __future__ import annotations

import json

import pytest

from hangar import agent
from hangar.errors import ConversationMismatch, HarnessError, InvalidInput, NoConversationId
from hangar.harnesses import TurnSpec, get_harness
from hangar.harnesses.handoff import MARKER, TurnRecord, handoff_prompt


def lines(*events: dict[str, object]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_claude_names_new_conversations_resumes_them_and_forks_with_a_new_id() -> None:
    claude = get_harness("claude")
    first = claude.command(TurnSpec("do it", "/workspace/app", model="m", new_id="u1")).argv
    assert first[:2] == ["claude", "-p"] and first[-2:] == ["--session-id", "u1"]
    assert "--dangerously-skip-permissions" in first and ["--model", "m"] == first[6:8]
    resumed = claude.command(TurnSpec("more", "/w", conversation_id="u1")).argv
    assert resumed[-2:] == ["--resume", "u1"]
    fork = claude.command(TurnSpec("fork", "/w", fork_from="u1", new_id="u2")).argv
    assert fork[-5:] == ["--resume", "u1", "--fork-session", "--session-id", "u2"]
    assert claude.command(TurnSpec("x", "/w", new_id="u")).env["IS_SANDBOX"] == "1"
    with pytest.raises(InvalidInput):
        claude.command(TurnSpec("x", "/w"))


def test_codex_resumes_and_forks_by_thread_and_points_at_a_custom_endpoint() -> None:
    codex = get_harness("codex")
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    argv = codex.command(TurnSpec("go", "/w", model="gpt-5-codex", conversation_id="t1", env=env)).argv
    assert argv[:3] == ["codex", "exec", "--json"]
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    assert argv[-3:] == ["resume", "t1", "-"]
    assert 'model_provider="hangar"' in argv
    assert any('base_url = "http://127.0.0.1:9/v1"' in a for a in argv)
    assert codex.command(TurnSpec("go", "/w", fork_from="t1")).argv[-3:] == ["fork", "t1", "-"]


def test_pi_resumes_by_session_forks_and_declares_a_provider_for_a_custom_endpoint() -> None:
    pi = get_harness("pi")
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    spec = TurnSpec("go", "/w", model="m1", conversation_id="p1", env=env)
    # its RPC mode, driven for the turn by hangar's driver, which the message goes to on stdin
    assert pi.command(spec).argv == agent.command("pirpc", "pi", "--mode", "rpc", "--model",
                                                  "hangar/m1", "--session", "p1")  # fmt: skip
    assert pi.command(spec).stdin == b"go"
    models = pi.home_files(spec)[".pi/agent/models.json"]
    assert models["providers"]["hangar"]["baseUrl"] == "http://127.0.0.1:9/v1"
    assert models["providers"]["hangar"]["models"][0]["id"] == "m1"
    assert pi.home_files(TurnSpec("go", "/w")) == {}
    assert "--fork" in pi.command(TurnSpec("go", "/w", fork_from="p1")).argv


def test_each_adapter_reads_the_conversation_summary_and_usage_from_its_output() -> None:
    claude = get_harness("claude").outcome(
        TurnSpec("x", "/w", new_id="u1"),
        0,
        lines({"type": "system", "session_id": "u1"},
              {"type": "result", "result": "All done.", "session_id": "u1",
               "usage": {"input_tokens": 3, "output_tokens": 4}}),  # fmt: skip
        b"",
    )
    assert (claude.conversation_id, claude.summary, claude.usage) == (
        "u1", "All done.", {"input_tokens": 3, "output_tokens": 4})  # fmt: skip
    codex = get_harness("codex").outcome(
        TurnSpec("x", "/w"),
        0,
        lines({"type": "thread.started", "thread_id": "t9"},
              {"type": "item.completed", "item": {"type": "agent_message", "text": "Fixed."}},
              {"type": "turn.completed", "usage": {"input_tokens": 8}}),  # fmt: skip
        b"",
    )
    assert (codex.conversation_id, codex.summary, codex.usage) == ("t9", "Fixed.", {"input_tokens": 8})
    pi = get_harness("pi").outcome(
        TurnSpec("x", "/w"),
        0,
        lines(pi_state("p7"), {"type": "response", "command": "prompt", "success": True},
              {"type": "agent_end", "messages": [
                  {"role": "assistant", "content": [{"type": "text", "text": "Yes."}],
                   "usage": {"input": 2, "output": 1}}]}),  # fmt: skip
        b"",
    )
    assert (pi.conversation_id, pi.summary, pi.usage) == ("p7", "Yes.", {"input": 2, "output": 1})


def pi_state(conversation: str) -> dict[str, object]:
    """pi's answer to the driver's first command, as its RPC mode writes it."""
    return {"id": "hangar-state", "type": "response", "command": "get_state", "success": True,
            "data": {"sessionId": conversation, "sessionFile": f"/s/{conversation}.jsonl"}}


def test_pi_refusing_the_prompt_fails_the_turn_with_its_reason() -> None:
    refused = {"id": "hangar-prompt", "type": "response", "command": "prompt", "success": False,
               "error": "No API key found for hangar"}  # fmt: skip
    result = get_harness("pi").outcome(TurnSpec("x", "/w"), 1, lines(pi_state("p1"), refused),
                                       b"hangar: pi refused the prompt\n")  # fmt: skip
    assert result.conversation_id == "p1" and type(result.error) is HarnessError
    assert "pi refused the prompt: No API key found for hangar" in result.error.message


def test_a_pi_log_of_its_json_mode_still_names_its_conversation() -> None:
    """A turn started by a hangar from before the RPC mode, finished by this one."""
    result = get_harness("pi").outcome(TurnSpec("x", "/w"), 0, lines(
        {"type": "session", "id": "p0"}, {"type": "agent_end", "messages": []}), b"")  # fmt: skip
    assert result.ok and result.conversation_id == "p0"


def test_a_resume_that_lands_in_another_conversation_is_a_mismatch() -> None:
    result = get_harness("codex").outcome(
        TurnSpec("x", "/w", conversation_id="t1"), 0, lines({"type": "thread.started", "thread_id": "t2"}), b""
    )
    assert isinstance(result.error, ConversationMismatch)


def test_a_reported_failure_fails_the_turn_even_with_exit_zero() -> None:
    result = get_harness("codex").outcome(
        TurnSpec("x", "/w"),
        0,
        lines({"type": "thread.started", "thread_id": "t1"},
              {"type": "turn.failed", "error": {"message": "rate limited"}}),  # fmt: skip
        b"",
    )
    assert type(result.error) is HarnessError and "rate limited" in result.error.message


def test_codex_on_a_custom_endpoint_without_a_model_is_refused_up_front() -> None:
    spec = TurnSpec("x", "/w", env={"OPENAI_BASE_URL": "http://127.0.0.1:8787/v1"})
    with pytest.raises(HarnessError, match="needs a model"):
        get_harness("codex").command(spec)
    assert get_harness("codex").command(TurnSpec("x", "/w")).argv[:2] == ["codex", "exec"]


def test_model_api_retries_that_recover_do_not_fail_the_turn() -> None:
    codex = get_harness("codex").outcome(
        TurnSpec("x", "/w"),
        0,
        lines({"type": "thread.started", "thread_id": "t1"},
              {"type": "error", "message": "Reconnecting... 1/5 (stream disconnected)"},
              {"type": "item.completed", "item": {"type": "agent_message", "text": "Done."}},
              {"type": "turn.completed", "usage": {"input_tokens": 1}}),  # fmt: skip
        b"",
    )
    assert codex.ok and codex.summary == "Done."
    failed = {"role": "assistant", "content": [], "stopReason": "error",
              "errorMessage": "Connection error."}  # fmt: skip
    worked = {"role": "assistant", "content": [{"type": "text", "text": "Fine."}],
              "stopReason": "stop"}  # fmt: skip
    pi = get_harness("pi").outcome(
        TurnSpec("x", "/w"),
        0,
        lines(pi_state("p1"), {"type": "agent_end", "messages": [failed]},
              {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3},
              {"type": "agent_end", "messages": [worked]}),  # fmt: skip
        b"",
    )
    assert pi.ok and pi.summary == "Fine."
    gave_up = get_harness("pi").outcome(
        TurnSpec("x", "/w"), 0,
        lines(pi_state("p1"), {"type": "agent_end", "messages": [failed]}), b"",
    )  # fmt: skip
    assert gave_up.error is not None and "Connection error." in gave_up.error.message


def test_garbage_output_is_no_conversation_id() -> None:
    result = get_harness("pi").outcome(TurnSpec("x", "/w"), 0, b"not json\n{broken\n", b"")
    assert isinstance(result.error, NoConversationId)


def test_each_harness_has_its_own_conversation_folder_and_resume_hint() -> None:
    folders = {n: get_harness(n).conversation_dirs for n in ("claude", "codex", "pi", "antigravity")}
    assert folders == {
        "claude": (".claude/projects",),
        "codex": (".codex/sessions",),
        "pi": (".pi/agent/sessions",),
        "antigravity": (".gemini/antigravity-cli/conversations",),
    }
    assert get_harness("claude").resume_hint("u1") == "claude --resume u1"
    assert get_harness("codex").resume_hint("t1") == "codex resume t1"


def test_each_harness_resumes_interactively_with_the_sessions_model() -> None:
    def interactive(name: str, model: str | None = None, **env: str) -> tuple[list[str], dict[str, str]]:
        spec = TurnSpec("unused", "/w", model=model, conversation_id="c1", env=env)
        invocation = get_harness(name).interactive(spec)
        return invocation.argv, invocation.env

    assert interactive("claude") == (["claude", "--resume", "c1"], {
        "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "IS_DEMO": "1"})  # fmt: skip
    # An API key is used through a helper that prints it: its value is never on the command line.
    keyed = interactive("claude", ANTHROPIC_API_KEY="sk-secret-value")[0]
    assert keyed[3:] == ["--settings", '{"apiKeyHelper": "printenv ANTHROPIC_API_KEY"}']
    assert not any("sk-secret-value" in a for a in keyed)
    assert interactive("claude", "opus")[0] == ["claude", "--resume", "c1", "--model", "opus"]
    assert interactive("codex") == (
        ["codex", "resume", "--sandbox", "danger-full-access", "--", "c1"], {})
    assert interactive("pi", "openai/m1") == (
        ["pi", "--model", "openai/m1", "--session", "c1"], {"PI_OFFLINE": "1"})
    assert interactive("pi")[0] == ["pi", "--session", "c1"]
    assert interactive("antigravity") == (["agy", "--conversation", "c1"], {})
    assert interactive("antigravity", "m")[0] == ["agy", "--conversation", "c1", "--model", "m"]
    for name in ("claude", "codex", "pi", "antigravity"):  # never a prompt, never print mode
        argv = interactive(name, "m")[0]
        assert "unused" not in argv and "-p" not in argv and "exec" not in argv, name
    with pytest.raises(InvalidInput):
        get_harness("claude").interactive(TurnSpec("", "/w"))


def test_an_interactive_resume_on_a_custom_endpoint_gets_the_turns_provider() -> None:
    endpoint = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    codex = get_harness("codex")
    argv = codex.interactive(TurnSpec("", "/w", model="gpt-5-codex", conversation_id="t1",
                                      env=endpoint)).argv  # fmt: skip
    assert argv[:2] == ["codex", "resume"] and argv[-2:] == ["--", "t1"]
    assert ["--model", "gpt-5-codex"] == argv[4:6] and 'model_provider="hangar"' in argv
    assert any('base_url = "http://127.0.0.1:9/v1"' in a for a in argv)
    with pytest.raises(HarnessError):  # as for a turn: Codex's default model would do nothing
        codex.interactive(TurnSpec("", "/w", conversation_id="t1", env=endpoint))
    pi = get_harness("pi").interactive(TurnSpec("", "/w", model="m1", conversation_id="p1",
                                                env=endpoint))  # fmt: skip
    assert pi.argv == ["pi", "--model", "hangar/m1", "--session", "p1"]


def test_a_handoff_prompt_gives_the_compact_account_and_says_it_is_lossy() -> None:
    prompt = handoff_prompt(
        "now add the email step",
        [TurnRecord("build the onboarding flow", "Built the form."), TurnRecord("add tests", None)],
        branch="hangar/session/early-signal",
        last_check="pytest: 12 passed",
    )
    assert prompt.startswith(MARKER) and "lossy" in prompt
    assert "Original task: build the onboarding flow" in prompt
    assert "Built the form." in prompt and "(no summary)" in prompt
    assert "hangar/session/early-signal" in prompt and "pytest: 12 passed" in prompt
    assert prompt.rstrip().endswith("now add the email step")


def test_codex_gets_the_repo_folder_trusted_so_its_interactive_resume_asks_nothing() -> None:
    files = get_harness("codex").home_files(TurnSpec("go", '/workspace/my "app"'))
    assert files == {".codex/config.toml": {"projects": {'/workspace/my "app"':
                                                         {"trust_level": "trusted"}}}}


@pytest.mark.parametrize("name", ["claude", "codex", "pi", "antigravity"])
@pytest.mark.parametrize("message", ["- fix the typo", "--help", "-p", "x" * (200 << 10)])
def test_a_message_is_never_an_option_nor_an_argument_over_128_kib(name: str, message: str) -> None:
    invocation = get_harness(name).command(TurnSpec(message, "/w", new_id="u1", model="m"))
    other = get_harness(name).command(TurnSpec("other", "/w", new_id="u1", model="m"))
    if invocation.stdin is not None:  # read from standard input, byte for byte
        assert invocation.stdin == message.encode() and invocation.argv == other.argv
    else:  # Antigravity: after "--", where no option is looked for (unverified CLI)
        assert name == "antigravity" and invocation.argv[-2:] == ["--", message]

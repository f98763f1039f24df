"""The model stub calling any tool by name (an MCP tool as Claude Code and Codex offer it, pi's
own tools) over each API, and matching a first-turn rule when the CLI sends text of its own
after the person's prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from emulators.model import ModelStub, Scenario, ScenarioError
from tests.emulators.test_model_stub import (
    BASH_TOOL,
    EXEC_COMMAND_TOOL,
    PI_BASH_TOOL,
    anthropic_body,
    anthropic_first_turn,
    anthropic_message,
    chat_body,
    chat_chunks,
    codex_first_turn,
    first_text,
    post_json,
    responses_body,
    responses_result,
    sse,
)

NEW_SESSION = {"name": "csv", "message": "fix it: {prompt}", "env": "app", "labels": ["a", 1]}
SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "when": "hand over",
            "steps": [
                {"tool": "mcp__hangar__new_session", "arguments": NEW_SESSION},
                {"tool": "mcp__hangar__wait_for_turn", "arguments": {"ref": "csv"}},
                {"text": "Handed over."},
            ],
        },
        {"when": "short name", "steps": [{"tool": "new_session", "arguments": {"name": "s"}}]},
        {"when": "write a file", "steps": [{"tool": "write", "arguments": {"path": "a.txt"}}]},
        {"when": "missing tool", "steps": [{"tool": "mcp__other__nothing"}]},
        {"when": "make file", "steps": [{"shell": "echo hi > a.txt"}, {"text": "Made it."}]},
    ],
    "default": [{"text": "default answer"}],
}


def mcp_tool(name: str) -> dict[str, Any]:
    """A tool as Claude Code offers an MCP server's tool."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    return {"name": name, "description": "an MCP tool", "input_schema": schema}


HANGAR_TOOLS = [BASH_TOOL, mcp_tool("mcp__hangar__new_session"),
                mcp_tool("mcp__hangar__wait_for_turn")]  # fmt: skip
CODEX_HANGAR = {
    "type": "namespace",
    "name": "mcp__hangar",
    "description": "Tools in the mcp__hangar namespace.",
    "tools": [
        {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
        for n in ("new_session", "wait_for_turn")
    ],
}
PI_WRITE_TOOL = {"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}  # fmt: skip


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def claude(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {**anthropic_body(messages), "tools": tools}


def claude_mcp_round(name: str, result: str, n: int = 1) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}",
             "content": [{"type": "text", "text": result}]}]},
    ]  # fmt: skip


def test_a_tool_step_makes_claude_code_call_an_mcp_tool_with_its_arguments(
    stub: ModelStub,
) -> None:
    body = claude(anthropic_first_turn("please hand over the csv work"), HANGAR_TOOLS)
    message = anthropic_message(sse(stub, "/v1/messages?beta=true", body))
    assert message["stop_reason"] == "tool_use"
    [block] = message["content"]
    assert block["type"] == "tool_use" and block["name"] == "mcp__hangar__new_session"
    assert block["input"] == {**NEW_SESSION, "message": "fix it: please hand over the csv work"}


def test_tool_steps_follow_each_other_and_end_in_the_rules_text(stub: ModelStub) -> None:
    first = anthropic_first_turn("hand over")
    after_one = first + claude_mcp_round("mcp__hangar__new_session", '{"id": "ses-1"}')
    message = post_json(stub, "/v1/messages", claude(after_one, HANGAR_TOOLS))
    assert message["content"][0]["name"] == "mcp__hangar__wait_for_turn"
    assert message["content"][0]["input"] == {"ref": "csv"}
    after_two = after_one + claude_mcp_round("mcp__hangar__wait_for_turn", "{}", 2)
    assert first_text(post_json(stub, "/v1/messages", claude(after_two, HANGAR_TOOLS))) == (
        "Handed over."
    )


def test_a_last_tool_step_is_followed_by_done(stub: ModelStub) -> None:
    messages = anthropic_first_turn("short name") + claude_mcp_round("mcp__hangar__new_session", "")
    assert first_text(post_json(stub, "/v1/messages", claude(messages, HANGAR_TOOLS))) == "done"


def test_codex_gets_a_call_of_a_function_in_its_mcp_namespace(stub: ModelStub) -> None:
    body = responses_body(codex_first_turn("hand over"), [EXEC_COMMAND_TOOL, CODEX_HANGAR])
    events = sse(stub, "/v1/responses", body)
    [item] = responses_result(events)["output"]
    assert item["type"] == "function_call"
    assert (item["namespace"], item["name"]) == ("mcp__hangar", "new_session")
    assert json.loads(item["arguments"])["message"] == "fix it: hand over"
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert added[0]["namespace"] == "mcp__hangar" and added[0]["name"] == "new_session"

    history = codex_first_turn("hand over") + [
        {**item, "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "made"},
    ]
    text = ModelStub.transcript(responses_body(history, []), "responses")
    assert "tool_call: mcp__hangar__new_session {" in text
    again = post_json(stub, "/v1/responses", responses_body(history, [CODEX_HANGAR]))
    assert again["output"][0]["name"] == "wait_for_turn"


def test_pi_gets_a_call_of_its_own_write_tool_over_chat(stub: ModelStub) -> None:
    body = chat_body([{"role": "user", "content": "write a file"}])
    body["tools"] = [PI_BASH_TOOL, PI_WRITE_TOOL]
    chunks = chat_chunks(sse(stub, "/v1/chat/completions", body))
    parts = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]  # fmt: skip
    assert parts[0]["function"]["name"] == "write"
    assert json.loads("".join(p["function"]["arguments"] for p in parts)) == {"path": "a.txt"}


def test_a_short_name_finds_the_one_mcp_tool_it_ends_in(stub: ModelStub) -> None:
    body = claude(anthropic_first_turn("short name"), HANGAR_TOOLS)
    block = post_json(stub, "/v1/messages", body)["content"][0]
    assert (block["name"], block["input"]) == ("mcp__hangar__new_session", {"name": "s"})

    two = claude(anthropic_first_turn("short name"),
                 [*HANGAR_TOOLS, mcp_tool("mcp__other__new_session")])  # fmt: skip
    text = first_text(post_json(stub, "/v1/messages", two))
    assert text.startswith("no tool new_session offered") and "mcp__other__new_session" in text


def test_a_tool_step_whose_tool_is_not_offered_says_so_in_text(stub: ModelStub) -> None:
    body = claude(anthropic_first_turn("missing tool"), HANGAR_TOOLS)
    message = post_json(stub, "/v1/messages", body)
    assert message["stop_reason"] == "end_turn"
    text = first_text(message)
    assert text.startswith("no tool mcp__other__nothing offered") and "Bash" in text


def test_a_first_turn_rule_matches_when_claude_code_appends_its_own_user_message(
    stub: ModelStub,
) -> None:
    appended = {"role": "user", "content": [{"type": "text", "text": "Claude Code's own note"}]}
    body = claude([*anthropic_first_turn("hand over"), appended], HANGAR_TOOLS)
    block = post_json(stub, "/v1/messages", body)["content"][0]
    assert block["name"] == "mcp__hangar__new_session"
    assert block["input"]["message"] == "fix it: hand over"

    same_message = anthropic_first_turn("hand over")
    same_message[0]["content"].append(appended["content"][0])
    block = post_json(stub, "/v1/messages", claude(same_message, HANGAR_TOOLS))["content"][0]
    assert block["name"] == "mcp__hangar__new_session"

    later = [*anthropic_first_turn("hand over"), appended,
             *claude_mcp_round("mcp__hangar__new_session", "made")]  # fmt: skip
    block = post_json(stub, "/v1/messages", claude(later, HANGAR_TOOLS))["content"][0]
    assert block["name"] == "mcp__hangar__wait_for_turn"


def test_the_latest_prompt_still_wins_and_a_finished_turn_ends_the_search(
    stub: ModelStub,
) -> None:
    both = [*anthropic_first_turn("hand over"), {"role": "user", "content": "make file"}]
    assert first_text(post_json(stub, "/v1/messages", claude(both, HANGAR_TOOLS))) == {
        "command": "echo hi > a.txt"
    }
    answered = [*anthropic_first_turn("hand over"),
                {"role": "assistant", "content": [{"type": "text", "text": "Handed over."}]},
                {"role": "user", "content": "thanks"}]  # fmt: skip
    assert first_text(post_json(stub, "/v1/messages", claude(answered, HANGAR_TOOLS))) == (
        "default answer"
    )


def test_scenario_parse_refuses_malformed_tool_steps() -> None:
    with pytest.raises(ScenarioError, match=r"default\[0\] needs exactly one of shell, text"):
        Scenario.parse({"default": [{"tool": "x", "text": "y"}]})
    with pytest.raises(ScenarioError, match="arguments go with a tool step only"):
        Scenario.parse({"default": [{"text": "y", "arguments": {}}]})
    with pytest.raises(ScenarioError, match=r"default\[0\]\.arguments must be an object"):
        Scenario.parse({"default": [{"tool": "x", "arguments": ["a"]}]})
    with pytest.raises(ScenarioError, match="not empty"):
        Scenario.parse({"default": [{"tool": ""}]})
    step = Scenario.parse({"default": [{"tool": "x"}]}).default[0]
    assert (step.tool, step.arguments) == ("x", {})

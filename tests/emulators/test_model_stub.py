"""The model stub over real HTTP: each API's framing, the stateless step choice, side requests,
delays, the request log and scenario replacement."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.model import ModelStub, Scenario, ScenarioError

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "when": "make file",
            "steps": [{"shell": "echo hi > a.txt"}, {"text": "Made it: {prompt}"}],
        },
        {"when": "two shells", "steps": [{"shell": "true"}, {"shell": "false"}]},
        {"when": "slowly", "steps": [{"text": "slow answer", "delay": 0.2}]},
        {"when": "forever", "delay": 60, "steps": [{"text": "never sent"}]},
    ],
    "default": [{"text": "default answer"}],
    "models": ["model-a", "model-b"],
    "side": "side answer",
}

BASH_TOOL = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
}
EXEC_COMMAND_TOOL = {
    "type": "function",
    "name": "exec_command",
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
        "required": ["cmd"],
    },
}
SHELL_ARGV_TOOL = {
    "type": "function",
    "name": "shell",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}
PI_BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
REMINDER = "<system-reminder>\nToday is a day. make file is mentioned here.\n</system-reminder>"


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def call(
    stub: ModelStub,
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        stub.url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post_json(stub: ModelStub, path: str, body: Any) -> Any:
    status, raw = call(stub, "POST", path, body)
    assert status == 200, raw
    return json.loads(raw)


def sse(stub: ModelStub, path: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """POST a streaming request and parse the SSE framing strictly: every event is
    ``event:``/``data:`` lines ending in a blank line, every data line is JSON (or [DONE])."""
    status, raw = call(stub, "POST", path, {**body, "stream": True})
    assert status == 200, raw
    text = raw.decode()
    assert text.endswith("\n\n")
    events: list[tuple[str | None, Any]] = []
    for block in text[:-2].split("\n\n"):
        name: str | None = None
        data: Any = None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value if value == "[DONE]" else json.loads(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        events.append((name, data))
    return events


def anthropic_body(messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "model-a",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": messages,
    }
    if tools:
        body["tools"] = [BASH_TOOL]
    return body


def anthropic_first_turn(prompt: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": prompt}],
        }
    ]


def anthropic_tool_round(command: str, result: str, n: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}",
                    "name": "Bash",
                    "input": {"command": command},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result},
                {"type": "text", "text": "<system-reminder>files changed</system-reminder>"},
            ],
        },
    ]


def anthropic_message(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """Rebuild the streamed message the way a client does, checking the event order."""
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    for name, data in events:
        assert data["type"] == name
    message: dict[str, Any] = events[0][1]["message"]
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    open_blocks: set[int] = set()
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
            open_blocks.add(data["index"])
        elif name == "content_block_delta":
            assert data["index"] in open_blocks
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            open_blocks.remove(data["index"])
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
    assert not open_blocks
    for index, raw in partial.items():
        blocks[index]["input"] = json.loads(raw)
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


# -- Anthropic Messages ---------------------------------------------------------------------------


def test_anthropic_stream_makes_a_bash_call_for_a_shell_step(stub: ModelStub) -> None:
    events = sse(stub, "/v1/messages?beta=true", anthropic_body(anthropic_first_turn("make file")))
    message = anthropic_message(events)
    assert message["stop_reason"] == "tool_use"
    [block] = message["content"]
    assert block["type"] == "tool_use" and block["name"] == "Bash"
    assert block["input"] == {"command": "echo hi > a.txt"}
    assert block["id"].startswith("toolu_")
    assert message["usage"]["input_tokens"] > 0


def test_anthropic_stream_answers_text_after_the_tool_round(stub: ModelStub) -> None:
    messages = anthropic_first_turn("please make file") + anthropic_tool_round("echo hi", "")
    message = anthropic_message(sse(stub, "/v1/messages", anthropic_body(messages)))
    assert message["stop_reason"] == "end_turn"
    assert message["content"] == [{"type": "text", "text": "Made it: please make file"}]


def test_anthropic_without_stream_answers_one_message_object(stub: ModelStub) -> None:
    message = post_json(stub, "/v1/messages", anthropic_body(anthropic_first_turn("make file")))
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert message["content"][0]["input"] == {"command": "echo hi > a.txt"}


def test_anthropic_prompt_as_a_plain_string_with_an_inline_reminder(stub: ModelStub) -> None:
    body = anthropic_body([{"role": "user", "content": f"{REMINDER}\nsomething else"}])
    message = post_json(stub, "/v1/messages", body)
    # The reminder mentions "make file", but only the prompt outside it selects the rule.
    assert message["content"] == [{"type": "text", "text": "default answer"}]


def test_count_tokens_answers_an_estimate(stub: ModelStub) -> None:
    counted = post_json(
        stub, "/v1/messages/count_tokens", anthropic_body(anthropic_first_turn("x"))
    )
    assert isinstance(counted["input_tokens"], int) and counted["input_tokens"] > 0


# -- OpenAI Responses ---------------------------------------------------------------------------


def responses_body(items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "model-b", "instructions": "You are Codex.", "input": items, "tools": tools}


def codex_first_turn(prompt: str) -> list[dict[str, Any]]:
    def user(text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }

    return [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "rules"}],
        },
        user("<environment_context>\n  <cwd>/work/repo</cwd>\n</environment_context>"),
        user(prompt),
    ]


def codex_tool_round(output: str, n: int = 1) -> list[dict[str, Any]]:
    return [
        {"type": "reasoning", "summary": []},
        {
            "type": "function_call",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": "true"}),
            "call_id": f"call_{n}",
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": output},
    ]


def responses_result(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """Check the Responses framing and return the completed response."""
    names = [name for name, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-2:] == ["response.output_item.done", "response.completed"]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    for name, data in events:
        assert data["type"] == name
    response: dict[str, Any] = events[-1][1]["response"]
    assert response["status"] == "completed"
    assert response["output"] == [events[-2][1]["item"]]
    usage = response["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    return response


def test_responses_stream_calls_exec_command_with_cmd_and_workdir(stub: ModelStub) -> None:
    events = sse(
        stub, "/v1/responses", responses_body(codex_first_turn("make file"), [EXEC_COMMAND_TOOL])
    )
    response = responses_result(events)
    [item] = response["output"]
    assert item["type"] == "function_call" and item["name"] == "exec_command"
    assert json.loads(item["arguments"]) == {"cmd": "echo hi > a.txt", "workdir": "/work/repo"}
    streamed = "".join(
        d["delta"] for n, d in events if n == "response.function_call_arguments.delta"
    )
    assert streamed == item["arguments"]


def test_responses_maps_a_shell_step_onto_an_argv_shell_tool(stub: ModelStub) -> None:
    body = responses_body(codex_first_turn("make file"), [SHELL_ARGV_TOOL])
    [item] = responses_result(sse(stub, "/v1/responses", body))["output"]
    assert item["name"] == "shell"
    assert json.loads(item["arguments"]) == {"command": ["bash", "-lc", "echo hi > a.txt"]}


def test_responses_stream_answers_text_after_the_function_call_output(stub: ModelStub) -> None:
    items = codex_first_turn("make file") + codex_tool_round("Process exited with code 0")
    events = sse(stub, "/v1/responses", responses_body(items, [EXEC_COMMAND_TOOL]))
    [item] = responses_result(events)["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    assert item["content"][0]["text"] == "Made it: make file"
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert deltas == "Made it: make file"


def test_responses_without_stream_answers_one_response_object(stub: ModelStub) -> None:
    response = post_json(
        stub, "/v1/responses", responses_body(codex_first_turn("hi"), [EXEC_COMMAND_TOOL])
    )
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "default answer"


# -- OpenAI Chat Completions ----------------------------------------------------------------------


def chat_body(messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "model-a",
        "messages": [{"role": "system", "content": "You are pi."}, *messages],
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = [PI_BASH_TOOL]
    return body


def chat_chunks(events: list[tuple[str | None, Any]]) -> list[dict[str, Any]]:
    assert events[-1] == (None, "[DONE]")
    assert all(name is None for name, _ in events)
    chunks = [data for _, data in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    return chunks


def test_chat_stream_calls_bash_with_command(stub: ModelStub) -> None:
    chunks = chat_chunks(
        sse(stub, "/v1/chat/completions", chat_body([{"role": "user", "content": "make file"}]))
    )
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"]]
    parts = [call[0] for call in calls if call]
    assert parts[0]["type"] == "function" and parts[0]["function"]["name"] == "bash"
    assert parts[0]["id"].startswith("call_")
    arguments = "".join(p["function"]["arguments"] for p in parts)
    assert json.loads(arguments) == {"command": "echo hi > a.txt"}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_chat_stream_answers_text_after_the_tool_message(stub: ModelStub) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "make file"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "(no output)"},
    ]
    chunks = chat_chunks(sse(stub, "/v1/chat/completions", chat_body(messages)))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Made it: make file"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"


def test_chat_without_stream_answers_one_completion(stub: ModelStub) -> None:
    completion = post_json(
        stub, "/v1/chat/completions", chat_body([{"role": "user", "content": "make file"}])
    )
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "bash"


# -- the stateless step choice ------------------------------------------------------------------


def first_text(message: dict[str, Any]) -> Any:
    block = message["content"][0]
    return block["text"] if block["type"] == "text" else block["input"]


def test_a_new_prompt_after_a_finished_turn_starts_its_own_rule_at_step_zero(
    stub: ModelStub,
) -> None:
    history = (
        anthropic_first_turn("make file")
        + anthropic_tool_round("echo hi > a.txt", "")
        + [{"role": "assistant", "content": [{"type": "text", "text": "Made it"}]}]
    )
    again = history + [{"role": "user", "content": "two shells please"}]
    assert first_text(post_json(stub, "/v1/messages", anthropic_body(again))) == {"command": "true"}
    other = history + [{"role": "user", "content": "what now?"}]
    assert first_text(post_json(stub, "/v1/messages", anthropic_body(other))) == "default answer"


def test_steps_past_the_end_repeat_final_text_or_say_done(stub: ModelStub) -> None:
    rounds = (
        anthropic_tool_round("a", "", 1)
        + anthropic_tool_round("b", "", 2)
        + anthropic_tool_round("c", "", 3)
    )
    text_rule = anthropic_first_turn("make file") + rounds
    assert (
        first_text(post_json(stub, "/v1/messages", anthropic_body(text_rule)))
        == "Made it: make file"
    )
    shell_rule = anthropic_first_turn("two shells") + rounds
    assert first_text(post_json(stub, "/v1/messages", anthropic_body(shell_rule))) == "done"
    second = anthropic_first_turn("two shells") + anthropic_tool_round("true", "")
    assert first_text(post_json(stub, "/v1/messages", anthropic_body(second))) == {
        "command": "false"
    }


def test_parallel_tool_calls_in_one_response_count_as_one_round(stub: ModelStub) -> None:
    items = codex_first_turn("two shells")
    items += [
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {"type": "function_call_output", "call_id": "c2", "output": "y"},
    ]
    response = post_json(stub, "/v1/responses", responses_body(items, [EXEC_COMMAND_TOOL]))
    assert json.loads(response["output"][0]["arguments"])["cmd"] == "false"


def test_a_step_needing_a_shell_when_none_is_offered_says_so(stub: ModelStub) -> None:
    body = anthropic_body(anthropic_first_turn("make file"))
    body["tools"] = [{"name": "Read", "input_schema": {"type": "object"}}]
    text = first_text(post_json(stub, "/v1/messages", body))
    assert "no shell tool" in text and "Read" in text


def test_side_requests_without_tools_get_the_side_text_and_consume_no_step(stub: ModelStub) -> None:
    title = anthropic_body(anthropic_first_turn("make file"), tools=False)
    assert first_text(post_json(stub, "/v1/messages", title)) == "side answer"
    chat_title = chat_body([{"role": "user", "content": "make file"}], tools=False)
    assert (
        post_json(stub, "/v1/chat/completions", chat_title)["choices"][0]["message"]["content"]
        == "side answer"
    )
    turn = anthropic_body(anthropic_first_turn("make file"))
    assert first_text(post_json(stub, "/v1/messages", turn)) == {"command": "echo hi > a.txt"}


def test_choice_depends_only_on_the_request_so_retries_repeat_it(stub: ModelStub) -> None:
    body = anthropic_body(anthropic_first_turn("make file"))
    answers = [first_text(post_json(stub, "/v1/messages", body)) for _ in range(3)]
    assert answers == [{"command": "echo hi > a.txt"}] * 3


# -- delays -------------------------------------------------------------------------------------


def test_a_step_delay_holds_the_response_back_at_least_that_long(stub: ModelStub) -> None:
    started = time.monotonic()
    message = post_json(stub, "/v1/messages", anthropic_body(anthropic_first_turn("slowly")))
    assert time.monotonic() - started >= 0.2
    assert first_text(message) == "slow answer"


def test_a_delayed_request_is_logged_on_arrival_and_stop_cuts_the_wait_short() -> None:
    stub = ModelStub(SCENARIO).start()
    try:
        with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
            call(
                stub,
                "POST",
                "/v1/messages",
                anthropic_body(anthropic_first_turn("forever")),
                timeout=0.3,
            )
        [entry] = stub.wait_for_requests(1, timeout=5)
        assert "forever" in ModelStub.transcript(entry["body"])
    finally:
        started = time.monotonic()
        stub.stop()
    assert time.monotonic() - started < 10


# -- request log and control endpoints ----------------------------------------------------------


def test_request_log_records_api_path_and_body_but_no_headers(stub: ModelStub) -> None:
    post_json(stub, "/v1/messages?beta=true", anthropic_body(anthropic_first_turn("hi")))
    post_json(stub, "/v1/responses", responses_body(codex_first_turn("hi"), [EXEC_COMMAND_TOOL]))
    status, _ = call(
        stub,
        "POST",
        "/v1/chat/completions",
        chat_body([{"role": "user", "content": "hi"}]),
        headers={"Authorization": "Bearer secret-token-123"},
    )
    assert status == 200
    status, raw = call(stub, "GET", "/_stub/requests")
    assert status == 200 and b"secret-token-123" not in raw
    logged = json.loads(raw)
    assert [(e["n"], e["api"], e["path"]) for e in logged] == [
        (1, "anthropic", "/v1/messages"),
        (2, "responses", "/v1/responses"),
        (3, "chat", "/v1/chat/completions"),
    ]
    assert logged[2]["body"]["messages"][1] == {"role": "user", "content": "hi"}
    assert all(isinstance(e["ts"], float) for e in logged)
    assert [e["n"] for e in stub.requests("responses")] == [2]

    assert call(stub, "DELETE", "/_stub/requests")[0] == 200
    assert stub.requests() == []
    post_json(stub, "/v1/messages", anthropic_body(anthropic_first_turn("hi")))
    assert [e["n"] for e in stub.requests()] == [4]


def test_log_file_gets_one_json_line_per_request(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with ModelStub(SCENARIO, log_file=log) as stub:
        post_json(stub, "/v1/messages", anthropic_body(anthropic_first_turn("hi")))
        post_json(stub, "/v1/chat/completions", chat_body([{"role": "user", "content": "hi"}]))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["api"] for line in lines] == ["anthropic", "chat"]


def test_put_scenario_replaces_it_and_a_bad_one_is_refused(stub: ModelStub) -> None:
    new = {"default": [{"text": "replaced"}]}
    status, raw = call(stub, "PUT", "/_stub/scenario", new)
    assert status == 200 and json.loads(raw) == new
    body = anthropic_body(anthropic_first_turn("make file"))
    assert first_text(post_json(stub, "/v1/messages", body)) == "replaced"

    status, raw = call(stub, "PUT", "/_stub/scenario", {"default": [{"shell": "x", "text": "y"}]})
    assert status == 400 and b"exactly one of shell, text and tool" in raw
    assert first_text(post_json(stub, "/v1/messages", body)) == "replaced"

    stub.set_scenario(SCENARIO)
    assert first_text(post_json(stub, "/v1/messages", body)) == {"command": "echo hi > a.txt"}


def test_scenario_parse_names_the_bad_field() -> None:
    with pytest.raises(ScenarioError, match=r"rules\[0\]\.when"):
        Scenario.parse({"rules": [{"steps": [{"text": "x"}]}]})
    with pytest.raises(ScenarioError, match="delay"):
        Scenario.parse({"default": [{"text": "x", "delay": -1}]})
    with pytest.raises(ScenarioError, match="unknown scenario keys"):
        Scenario.parse({"rule": []})
    assert Scenario.parse(None).default[0].text == "ok"


def test_models_lists_the_scenario_models(stub: ModelStub) -> None:
    status, raw = call(stub, "GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(raw)["data"]] == ["model-a", "model-b"]


def test_unknown_paths_get_404_and_bad_json_400(stub: ModelStub) -> None:
    assert call(stub, "POST", "/v1/embeddings", {})[0] == 404
    request = urllib.request.Request(stub.url + "/v1/messages", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400


# -- transcripts --------------------------------------------------------------------------------


def test_transcript_carries_prompt_tool_call_and_result_for_each_api() -> None:
    anthropic = anthropic_body(
        anthropic_first_turn("make file") + anthropic_tool_round("echo hi", "RESULT-A")
    )
    responses = responses_body(codex_first_turn("make file") + codex_tool_round("RESULT-R"), [])
    chat = chat_body(
        [
            {"role": "user", "content": "make file"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "RESULT-C"},
        ]
    )
    for body, result in ((anthropic, "RESULT-A"), (responses, "RESULT-R"), (chat, "RESULT-C")):
        text = ModelStub.transcript(body)
        assert "prompt: make file" in text
        assert f"tool_result: {result}" in text
        assert "tool_call: " in text
        assert "You are" not in text  # system and developer prompts are left out
    assert ModelStub.api_of(anthropic) == "anthropic"
    assert ModelStub.api_of(responses) == "responses"
    assert ModelStub.api_of(chat) == "chat"


# -- the command line ---------------------------------------------------------------------------


def test_command_line_prints_the_url_and_serves(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"default": [{"text": "from file"}]}))
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulators.model",
            "--port",
            "0",
            "--scenario",
            str(scenario),
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("model stub listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        body = json.dumps(chat_body([{"role": "user", "content": "hi"}])).encode()
        request = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["choices"][0]["message"]["content"] == "from file"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert json.loads(log.read_text())["api"] == "chat"

"""hangar/agent/codexlive.py, the pure adapter between the steering driver and ``codex
app-server``: first on app-server lines shaped as Codex 0.171.0 writes them (the handshake, a
thread's answer, turn and item notifications, token usage, refusals, requests of its own), then
once against the real ``codex app-server`` and the model stub, steered mid-turn.

The real CLI comes from ``$HANGAR_HARNESS_DIR/node_modules/.bin`` (default
``~/.local/share/hangar/harnesses``); a missing one fails.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from emulators.model import ModelStub
from hangar.agent.codexlive import CodexLive
from hangar.errors import HarnessError
from hangar.harnesses import TurnSpec
from hangar.harnesses.codex import Codex

THREAD = "01a2459a-68f3-7023-aacf-2c53e54238be"
TURN = "01a2459a-690a-7bb0-ad86-ecd9b0a061f5"
TURN2 = "01a2459a-6a4f-7e02-aed7-dfb3e7d5cfd5"
OPTIONS: dict[str, Any] = {"cwd": "/workspace/app", "model": "gpt-5-codex",
                           "conversation_id": None, "fork_from": None}  # fmt: skip


def sent(lines: list[bytes] | None) -> list[dict[str, Any]]:
    """The JSON objects of lines the adapter wrote, each checked to end in a newline."""
    assert lines is not None
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    return [json.loads(line) for line in lines]


Lines = list[dict[str, Any]]


def feed(live: CodexLive, message: dict[str, Any]) -> tuple[Lines, Lines]:
    log, writes = live.output(json.dumps(message).encode())
    return sent(log), sent(writes)


def answer(request: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"id": request["id"], "result": result}


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": {"threadId": THREAD, **params}}


def turn(turn_id: str, status: str = "inProgress", **more: Any) -> dict[str, Any]:
    return {"id": turn_id, "items": [], "status": status, "error": None, **more}


def usage(turn_id: str, total: int, cached: int = 0) -> dict[str, Any]:
    counts = {"totalTokens": total + 10, "inputTokens": total, "cachedInputTokens": cached,
              "cacheWriteInputTokens": 0, "outputTokens": 10,
              "reasoningOutputTokens": 0}  # fmt: skip
    return note("thread/tokenUsage/updated", turnId=turn_id,
                tokenUsage={"total": counts, "last": counts})  # fmt: skip


def running(options: dict[str, Any] | None = None) -> tuple[CodexLive, dict[str, Any]]:
    """An adapter whose thread was started and whose first turn runs; and that turn/start."""
    live = CodexLive(options or OPTIONS)
    thread_request = sent(live.begin("please be slow"))[-1]
    _, [start] = feed(live, answer(thread_request, {"thread": {"id": THREAD}}))
    feed(live, answer(start, {"turn": turn(TURN)}))
    feed(live, note("turn/started", turn=turn(TURN)))
    return live, start


def test_begin_writes_the_handshake_then_a_thread_with_approvals_never_and_no_sandbox() -> None:
    live = CodexLive(OPTIONS)
    initialize, initialized, thread = sent(live.begin("hello"))

    assert initialize["method"] == "initialize" and "id" in initialize
    assert initialize["params"]["clientInfo"]["name"] == "hangar"
    assert initialized == {"method": "initialized"}
    assert thread["method"] == "thread/start" and thread["id"] != initialize["id"]
    assert thread["params"] == {
        "cwd": "/workspace/app", "model": "gpt-5-codex",
        "approvalPolicy": "never", "sandbox": "danger-full-access"}  # fmt: skip
    assert live.idle is False and live.failure is None


@pytest.mark.parametrize(("option", "method"), [("conversation_id", "thread/resume"),
                                                ("fork_from", "thread/fork")])  # fmt: skip
def test_a_resume_or_fork_names_the_thread_it_continues(option: str, method: str) -> None:
    live = CodexLive({**OPTIONS, option: THREAD})
    thread = sent(live.begin("hello"))[-1]

    assert thread["method"] == method
    assert thread["params"]["threadId"] == THREAD
    assert thread["params"]["approvalPolicy"] == "never"
    assert thread["params"]["sandbox"] == "danger-full-access"


def test_the_threads_id_is_logged_as_exec_does_and_the_turn_starts_with_the_message() -> None:
    live = CodexLive(OPTIONS)
    thread = sent(live.begin("fix the bug"))[-1]
    log, [start] = feed(live, answer(thread, {"thread": {"id": THREAD}}))

    assert log == [{"type": "thread.started", "thread_id": THREAD}]
    assert start["method"] == "turn/start"
    assert start["params"]["threadId"] == THREAD
    assert [i["text"] for i in start["params"]["input"]] == ["fix the bug"]
    assert live.idle is False


def test_a_steer_waits_for_the_turns_id_then_names_it_as_expected() -> None:
    live = CodexLive(OPTIONS)
    thread = sent(live.begin("please be slow"))[-1]
    assert live.steer("too early") is None  # no thread yet
    _, [start] = feed(live, answer(thread, {"thread": {"id": THREAD}}))
    assert live.steer("still too early") is None  # the turn's id is not known yet

    feed(live, answer(start, {"turn": turn(TURN)}))
    [steer] = sent(live.steer("look at the tests too"))

    assert steer["method"] == "turn/steer"
    assert steer["params"]["threadId"] == THREAD and steer["params"]["expectedTurnId"] == TURN
    assert [i["text"] for i in steer["params"]["input"]] == ["look at the tests too"]


def test_an_interrupt_names_the_running_turn_and_its_end_marks_the_turn_interrupted() -> None:
    live = CodexLive(OPTIONS)
    thread = sent(live.begin("please be slow"))[-1]
    _, [start] = feed(live, answer(thread, {"thread": {"id": THREAD}}))
    assert live.interrupt() is None
    feed(live, answer(start, {"turn": turn(TURN)}))

    [interrupt] = sent(live.interrupt())
    assert interrupt["method"] == "turn/interrupt"
    assert interrupt["params"] == {"threadId": THREAD, "turnId": TURN}
    feed(live, answer(interrupt, {}))
    log, writes = feed(live, note("turn/completed", turn=turn(TURN, "interrupted")))

    assert live.interrupted is True and live.idle is True
    assert writes == [] and not [e for e in log if e["type"].startswith("turn.")]
    assert live.interrupt() == []  # nothing runs: nothing to interrupt


def test_a_follow_up_after_the_turn_ended_starts_another_turn_in_the_same_thread() -> None:
    live, first = running()
    feed(live, note("turn/completed", turn=turn(TURN, "completed")))
    assert live.idle is True

    [start] = sent(live.follow_up("and now the docs"))
    assert start["method"] == "turn/start" and start["id"] != first["id"]
    assert start["params"]["threadId"] == THREAD
    assert [i["text"] for i in start["params"]["input"]] == ["and now the docs"]
    assert live.idle is False
    feed(live, answer(start, {"turn": turn(TURN2)}))
    assert sent(live.steer("x"))[0]["params"]["expectedTurnId"] == TURN2


def test_each_turn_completed_carries_this_processs_totals_over_all_its_turns() -> None:
    live = CodexLive({**OPTIONS, "conversation_id": THREAD})
    thread = sent(live.begin("go on"))[-1]
    _, [start] = feed(live, answer(thread, {"thread": {"id": THREAD}}))
    feed(live, usage("an-earlier-processes-turn", 5000, cached=100))  # replayed on resume
    feed(live, answer(start, {"turn": turn(TURN)}))
    feed(live, usage(TURN, 5300, cached=150))
    feed(live, usage(TURN, 5800, cached=300))
    first, _ = feed(live, note("turn/completed", turn=turn(TURN, "completed")))

    [again] = sent(live.follow_up("more"))
    feed(live, answer(again, {"turn": turn(TURN2)}))
    feed(live, usage(TURN2, 6500, cached=400))
    second, _ = feed(live, note("turn/completed", turn=turn(TURN2, "completed")))

    assert first[-1] == {"type": "turn.completed", "usage": {
        "input_tokens": 800, "cached_input_tokens": 200, "cache_write_input_tokens": 0,
        "output_tokens": 0, "reasoning_output_tokens": 0}}  # fmt: skip
    assert second[-1]["type"] == "turn.completed"
    assert second[-1]["usage"]["input_tokens"] == 1500
    assert second[-1]["usage"]["cached_input_tokens"] == 300


def test_requests_of_the_app_server_are_answered_at_once_declined_or_refused() -> None:
    live, _ = running()
    approval = {"id": 0, "method": "item/commandExecution/requestApproval",
                "params": {"threadId": THREAD, "turnId": TURN, "itemId": "call_1"}}  # fmt: skip
    unknown = {"id": "r-7", "method": "account/chatgptAuthTokens/refresh", "params": {}}

    log1, [declined] = feed(live, approval)
    log2, [refused] = feed(live, unknown)

    assert declined == {"id": 0, "result": {"decision": "decline"}}
    assert refused["id"] == "r-7" and refused["error"]["code"] == -32601
    assert "result" not in refused and log1 == log2 == []


def test_a_refused_thread_start_is_a_failure_logged_for_the_outcome() -> None:
    live = CodexLive(OPTIONS)
    thread = sent(live.begin("hello"))[-1]
    refusal = {"id": thread["id"], "error": {"code": -32600, "message": "no rollout found"}}

    log, writes = feed(live, refusal)

    assert live.failure is not None and "no rollout found" in live.failure
    assert writes == [] and live.idle is False
    spec = TurnSpec(prompt="hello", cwd="/workspace/app")
    stdout = b"".join(json.dumps(e).encode() + b"\n" for e in log)
    result = Codex().outcome(spec, 1, stdout, b"")
    assert not result.ok and "no rollout found" in str(result.error)


def test_a_steer_refused_because_the_turn_ended_starts_the_next_turn_with_its_text() -> None:
    live, _ = running()
    [steer] = sent(live.steer("one more thing"))
    feed(live, note("turn/completed", turn=turn(TURN, "completed")))
    assert live.idle is False  # the steer awaits its answer

    refusal = {"id": steer["id"], "error": {"code": -32600, "message": "no active turn to steer"}}
    _, [start] = feed(live, refusal)

    assert start["method"] == "turn/start"
    assert [i["text"] for i in start["params"]["input"]] == ["one more thing"]
    assert live.idle is False


def test_a_steer_refused_by_the_running_turn_waits_and_starts_the_next_one() -> None:
    live, _ = running()
    [steer] = sent(live.steer("later then"))
    refusal = {"id": steer["id"], "error": {"code": -32600, "message": "turn is not steerable"}}
    _, writes = feed(live, refusal)
    assert writes == [] and live.idle is False and live.unsent == ["later then"]

    _, [start] = feed(live, note("turn/completed", turn=turn(TURN, "completed")))
    assert [i["text"] for i in start["params"]["input"]] == ["later then"]
    assert live.unsent == []


def test_items_are_logged_as_codex_exec_logs_them_and_the_outcome_reads_them() -> None:
    live = CodexLive(OPTIONS)
    thread = sent(live.begin("run it"))[-1]
    log, [start] = feed(live, answer(thread, {"thread": {"id": THREAD}}))
    command = {"type": "commandExecution", "id": "call_9", "command": "/bin/bash -lc 'echo hi'",
               "aggregatedOutput": None, "exitCode": None, "status": "inProgress"}  # fmt: skip
    done = {**command, "aggregatedOutput": "hi\n", "exitCode": 0, "status": "completed"}
    reply = {"type": "agentMessage", "id": "msg_1", "text": "Said hi."}
    for message in [
        answer(start, {"turn": turn(TURN)}),
        note("warning", message="Model metadata not found"),
        note("turn/started", turn=turn(TURN)),
        note("item/started", turnId=TURN, item={"type": "userMessage", "id": "u1", "content": []}),
        note("item/started", turnId=TURN, item=command),
        note("item/completed", turnId=TURN, item=done),
        note("item/started", turnId=TURN, item={**reply, "text": ""}),
        note("item/completed", turnId=TURN, item=reply),
        usage(TURN, 1200),
        note("turn/completed", turn=turn(TURN, "completed")),
    ]:
        log += feed(live, message)[0]

    assert [e["type"] for e in log] == ["thread.started", "item.completed", "turn.started",
                                        "item.started", "item.completed", "item.completed",
                                        "turn.completed"]  # fmt: skip
    assert log[1]["item"] == {"id": "item_0", "type": "error",
                              "message": "Model metadata not found"}  # fmt: skip
    assert log[3]["item"]["id"] == log[4]["item"]["id"] == "item_1"
    assert log[4]["item"] == {"id": "item_1", "type": "command_execution",
                              "command": "/bin/bash -lc 'echo hi'", "aggregated_output": "hi\n",
                              "exit_code": 0, "status": "completed"}  # fmt: skip
    assert log[5]["item"] == {"id": "item_2", "type": "agent_message", "text": "Said hi."}
    stdout = b"".join(json.dumps(e).encode() + b"\n" for e in log)
    result = Codex().outcome(TurnSpec(prompt="run it", cwd="/workspace/app"), 0, stdout, b"")
    assert result.ok and result.conversation_id == THREAD and result.summary == "Said hi."
    assert result.usage["input_tokens"] == 1200


def test_another_threads_turn_ending_does_not_end_this_one() -> None:
    live, _ = running()
    other = {"method": "turn/completed",
             "params": {"threadId": "sub-agent", "turn": turn("t-sub", "completed")}}  # fmt: skip
    log, _ = feed(live, other)
    assert log == [] and live.idle is False


def test_lines_that_are_not_json_objects_are_ignored() -> None:
    live, _ = running()
    deep = b"[" * 100_000 + b"]" * 100_000
    for raw in (b"", b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', deep,
                b'{"id": 999, "result": {}}'):  # fmt: skip
        assert live.output(raw) == ([], [])
    assert live.idle is False


def test_live_argv_is_the_app_server_with_execs_provider_overrides() -> None:
    spec = TurnSpec(prompt="hi", cwd="/workspace/app", model="gpt-5-codex",
                    env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})  # fmt: skip
    argv = Codex().live_argv(spec)
    one_shot = Codex().command(spec).argv

    assert argv[:2] == ["codex", "app-server"]
    overrides = argv[2:]
    assert overrides and overrides[0] == "-c"
    assert " ".join(overrides) in " ".join(one_shot)
    with pytest.raises(HarnessError):
        Codex().live_argv(TurnSpec(prompt="hi", cwd="/w", env=spec.env))


# The real app-server, once.

STEER = "STEERED-please-also-check-the-readme"
PROMPT = "please be slow"
GO = "GO"
SCENARIO = {
    "rules": [{"when": PROMPT, "steps": [
        {"shell": f"for i in $(seq 100); do [ -f {GO} ] && break; sleep 0.1; done; echo waited"},
        {"text": "finished"}]}],  # fmt: skip
    "default": [{"text": "steered and done"}],
    "models": ["gpt-5-codex"],
}
LINE_TIMEOUT = 60


def codex_bin() -> Path:
    root = Path(
        os.environ.get("HANGAR_HARNESS_DIR")
        or Path.home() / ".local" / "share" / "hangar" / "harnesses"
    )
    path = root / "node_modules" / ".bin" / "codex"
    if not path.exists():
        pytest.fail(f"the codex CLI is not installed at {path}: run `make harnesses` "
                    "(or set HANGAR_HARNESS_DIR)", pytrace=False)  # fmt: skip
    return path


def copy_lines(stream: IO[bytes], into: queue.Queue[bytes]) -> None:
    for raw in stream:
        into.put(raw)


@pytest.mark.harness
def test_the_real_app_server_takes_a_steer_mid_turn_and_its_log_reads_as_exec_output(
    tmp_path: Path,
) -> None:
    home, cwd = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    cwd.mkdir()
    with ModelStub(SCENARIO) as stub:
        env = {"OPENAI_BASE_URL": f"{stub.url}/v1", "OPENAI_API_KEY": "sk-stub"}
        spec = TurnSpec(prompt=PROMPT, cwd=str(cwd), model="gpt-5-codex", env=env)
        argv = Codex().live_argv(spec)
        argv[0] = str(codex_bin())
        proc_env = {"PATH": os.environ["PATH"], "HOME": str(home), **env}
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=proc_env)  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        lines: queue.Queue[bytes] = queue.Queue()
        reader = threading.Thread(target=copy_lines, args=(proc.stdout, lines))
        reader.start()
        live = CodexLive({"cwd": str(cwd), "model": spec.model, "conversation_id": None,
                          "fork_from": None})  # fmt: skip
        log: list[bytes] = []
        steer_pending, steered = False, False
        try:
            proc.stdin.write(b"".join(live.begin(PROMPT)))
            proc.stdin.flush()
            while not live.idle and live.failure is None:
                raw = lines.get(timeout=LINE_TIMEOUT)
                out, writes = live.output(raw.rstrip(b"\n"))
                log += out
                if not steered and any(b'"command_execution"' in x for x in out):
                    steer_pending, steered = True, True  # the slow step runs: steer now
                if steer_pending and (steer := live.steer(STEER)) is not None:
                    writes += steer
                    steer_pending = False
                    (cwd / GO).touch()
                proc.stdin.write(b"".join(writes))
                proc.stdin.flush()
        finally:
            proc.stdin.close()
            proc.wait(timeout=LINE_TIMEOUT)
            reader.join(timeout=LINE_TIMEOUT)

        assert live.failure is None and steered and not steer_pending
        requests = [r["body"] for r in stub.requests("responses") if r["body"].get("tools")]
    transcripts = [ModelStub.transcript(body) for body in requests]
    steered_requests = [t for t in transcripts if f"prompt: {STEER}" in t]
    assert steered_requests, transcripts
    # The same turn: the steer follows the first prompt's tool call and result in one request.
    assert f"prompt: {PROMPT}" in steered_requests[0] and "tool_result" in steered_requests[0]
    events = [json.loads(x) for x in log]
    assert [e["type"] for e in events].count("turn.started") == 1
    result = Codex().outcome(spec, 0, b"".join(log), b"")
    assert result.ok, result.error
    assert result.conversation_id == live.thread_id and result.conversation_id
    assert result.usage and result.usage["input_tokens"] > 0

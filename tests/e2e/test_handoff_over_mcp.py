"""The mission's second story end to end: a person's Claude Code, with hangar as its MCP server,
hands work to hangar and gets the patch back. The real Claude Code runs on the host (the
person's machine) in a throwaway HOME, configured with ``claude mcp add --transport http``; the
model stub scripts it to call ``new_session``, ``wait_for_turn`` and ``get_session_patch``; the
session's own agent, the real Claude Code in a sandbox of a real ``hangar serve``, is scripted
to change a file; the patch must come back to the first Claude Code as its tool result. The
same from Codex, whose MCP tools the stub calls in their namespace."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.model import Entry, ModelStub
from tests.e2e.conftest import Server, _server
from tests.e2e.test_acceptance import MODELS, add_env
from tests.harness.conftest import harness_dir
from tests.mcp.client import Mcp

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

ASK = "HAND-OFF: have hangar add a line about empty files to the README, then show me the patch"
WORK = "CSV-EDIT: say in the README that empty files are handled"
LINE = "Empty CSV files are handled."
TOOLS = ("mcp__hangar__new_session", "mcp__hangar__wait_for_turn",
         "mcp__hangar__get_session_patch")  # fmt: skip
SCENARIO = {
    "rules": [
        {"when": "HAND-OFF", "steps": [  # the person's Claude Code
            {"tool": TOOLS[0], "arguments": {"name": "csv", "message": WORK, "env": "app",
                                             "harness": "claude", "model": MODELS["claude"]}},
            {"tool": TOOLS[1], "arguments": {"ref": "csv", "timeout_seconds": 180}},
            {"tool": TOOLS[2], "arguments": {"ref": "csv"}},
            {"text": "Here is hangar's patch."}]},
        {"when": "CSV-EDIT", "steps": [  # the session's agent, in its sandbox
            {"shell": f"echo '{LINE}' >> README.md"}, {"text": "Noted empty files."}]},
    ],
    "models": [MODELS["claude"]],
}  # fmt: skip
CLAUDE_SECONDS = 240
SILENT_SECONDS = 60


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _server(tmp_path / "data", harness_dir())


def claude_code(home: Path, stub: ModelStub, token: str) -> dict[str, str]:
    """The person's Claude Code: its own HOME, the stub as its model API, and hangar's token in
    its environment only (the MCP config names ``${HANGAR_TOKEN}``, Claude Code expands it), so
    no command line another process can read carries it. With -p, Claude Code sends its first
    request before an HTTP MCP server has connected (offering WaitForMcpServers instead of its
    tools) unless MCP_CONNECTION_NONBLOCKING is off."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb",
            "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-stub",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
            "MCP_CONNECTION_NONBLOCKING": "0", "MCP_TIMEOUT": "30000",
            "MCP_TOOL_TIMEOUT": str(CLAUDE_SECONDS * 1000),
            "HANGAR_TOKEN": token}  # fmt: skip


def first_agent_requests(stub: ModelStub, api: str = "anthropic") -> list[dict[str, Any]]:
    """The person's agent's turn requests (the session's agent was asked CSV-EDIT)."""
    return [r for r in stub.requests(api) if r["body"].get("tools")
            and any(e.kind == "prompt" and "HAND-OFF" in e.text
                    for e in ModelStub.entries(r["body"], api))]  # fmt: skip


def hand_over(server: Server, remote: Path, stub: ModelStub, tmp_path: Path,
              **extra: str) -> tuple[dict[str, Any], list[Entry]]:  # fmt: skip
    """The person's Claude Code, with hangar added as its MCP server, asked to hand the work
    over: its result line, and the conversation its last model request carried."""
    add_env(server, remote, stub)
    home, laptop = tmp_path / "home", tmp_path / "laptop"
    home.mkdir()
    laptop.mkdir()
    env = {**claude_code(home, stub, (server.data_dir / "admin-token").read_text().strip()),
           **extra}  # fmt: skip
    claude = str(harness_dir() / "node_modules" / ".bin" / "claude")
    added = subprocess.run(
        [claude, "mcp", "add", "--transport", "http", "hangar", f"{server.url}/mcp",
         "--header", "Authorization: Bearer ${HANGAR_TOKEN}"],
        cwd=laptop, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr + added.stdout
    assert env["HANGAR_TOKEN"] not in (home / ".claude.json").read_text()

    # No --dangerously-skip-permissions: the three tools are allowed by name, anything else
    # would be refused (and show in permission_denials) since -p cannot ask.
    done = subprocess.run(
        [claude, "-p", "--output-format", "stream-json", "--verbose", "--model", MODELS["claude"],
         "--allowedTools", ",".join(TOOLS)],
        cwd=laptop, env=env, input=ASK, capture_output=True, text=True, timeout=CLAUDE_SECONDS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[-1], ModelStub.entries(first_agent_requests(stub)[-1]["body"])


def test_claude_code_hands_work_to_hangar_over_mcp_and_gets_the_patch_back(
    server: Server, remote: Path, stub: ModelStub, tmp_path: Path
) -> None:
    result, last = hand_over(server, remote, stub, tmp_path)
    assert (result["subtype"], result["result"]) == ("success", "Here is hangar's patch."), result
    assert result["permission_denials"] == []

    session = json.loads(server.ok("session", "get", "csv", "--json"))
    assert session["state"] == "idle" and len(session["turns"]) == 1
    assert (session["turns"][0]["outcome"], session["turns"][0]["summary"]) == (
        "exited", "Noted empty files.")  # fmt: skip
    patch = server.ok("session", "patch", "csv")
    assert f"+{LINE}\n" in patch and "README.md" in patch

    # What the person's Claude Code sent back to its model: the three calls, in order, and
    # each one's answer; the last answer is the session's patch.
    calls = [e.text.split(" ", 1) for e in last if e.kind == "tool_call"]
    assert [name for name, _ in calls] == list(TOOLS)
    assert json.loads(calls[0][1])["message"] == WORK
    results = [e.text for e in last if e.kind == "tool_result"]
    assert len(results) == 3, results
    started = json.loads(results[0])
    assert (started["session"]["name"], started["turn"]) == ("csv", 1)
    waited = json.loads(results[1])
    assert (waited["done"], waited["outcome"], waited["summary"]) == (
        True, "exited", "Noted empty files.")  # fmt: skip
    assert json.loads(results[2]) == {"patch": patch}


def test_claude_code_keeps_waiting_through_a_silent_minute_of_the_sessions_agent(
    server: Server, remote: Path, stub: ModelStub, tmp_path: Path
) -> None:
    # Claude Code drops an MCP call that sent no progress for its idle limit (checked every
    # 30 s; 300 s unless set): with a 15 s limit, a minute in which the session's agent says
    # nothing (its model's answer held back) would cut wait_for_turn short unless hangar
    # keeps saying something.
    silent = json.loads(json.dumps(SCENARIO))
    silent["rules"][1]["steps"][1]["delay"] = SILENT_SECONDS
    stub.set_scenario(silent)
    result, last = hand_over(server, remote, stub, tmp_path,
                             CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT="15000")  # fmt: skip
    assert result["result"] == "Here is hangar's patch.", result
    waited = [e.text for e in last if e.kind == "tool_result"][1]
    assert "no response or progress" not in waited
    assert json.loads(waited)["outcome"] == "exited"


def test_codex_hands_work_to_hangar_over_mcp_and_gets_the_patch_back(
    server: Server, remote: Path, stub: ModelStub, tmp_path: Path
) -> None:
    """The same hand-over from Codex: its MCP tools come in a namespace (the stub answers a
    function_call naming it), and codex exec runs them without bypassing its approvals when
    the server's block says so."""
    add_env(server, remote, stub)
    home, laptop = tmp_path / "home", tmp_path / "laptop"
    (home / ".codex").mkdir(parents=True)
    laptop.mkdir()
    (home / ".codex" / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "stub"\n\n[model_providers.stub]\n'
        f'name = "stub"\nbase_url = "{stub.url}/v1"\nenv_key = "STUB_API_KEY"\n'
        'wire_api = "responses"\n\n[mcp_servers.hangar]\n'
        f'url = "{server.url}/mcp"\nbearer_token_env_var = "HANGAR_TOKEN"\n'
        f'default_tools_approval_mode = "approve"\ntool_timeout_sec = {CLAUDE_SECONDS}\n')
    token = (server.data_dir / "admin-token").read_text().strip()
    # Codex starts its turn without waiting for a server still building its MCP side (the
    # first /mcp request does): one call first, as any earlier client would have made.
    assert "new_session" in Mcp(server.url, token).tools()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb",
           "STUB_API_KEY": "sk-stub", "HANGAR_TOKEN": token}  # fmt: skip
    codex = str(harness_dir() / "node_modules" / ".bin" / "codex")
    done = subprocess.run([codex, "exec", "--json", "--skip-git-repo-check", "-"], cwd=laptop,
                          env=env, input=ASK, capture_output=True, text=True,
                          timeout=CLAUDE_SECONDS)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout[-4000:]
    items = [json.loads(line)["item"] for line in done.stdout.splitlines()
             if line.startswith('{"type":"item.completed"')]  # fmt: skip
    calls = [(i["server"], i["tool"], i["status"]) for i in items if i["type"] == "mcp_tool_call"]
    assert calls == [("hangar", t.rsplit("__", 1)[1], "completed") for t in TOOLS], items
    assert [i["text"] for i in items if i["type"] == "agent_message"] == ["Here is hangar's patch."]

    patch = server.ok("session", "patch", "csv")
    assert f"+{LINE}\n" in patch
    last = ModelStub.entries(first_agent_requests(stub, "responses")[-1]["body"], "responses")
    assert [e.text.split(" ", 1)[0] for e in last if e.kind == "tool_call"] == list(TOOLS)
    answer = [e.text for e in last if e.kind == "tool_result"][-1]
    assert json.loads(answer.split("Output:\n", 1)[-1]) == {"patch": patch}

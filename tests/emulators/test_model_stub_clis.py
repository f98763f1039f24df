"""The real Claude Code, Codex and pi CLIs against the model stub, on the host (no sandbox), each
in a temp HOME and a temp git repo: one turn where the stub has the CLI run one shell command
that writes a file and then answers in text, then a resumed turn that must carry the first; and
pi calling its own ``write`` tool where a scenario's tool step names it.

The CLIs come from ``$HANGAR_HARNESS_DIR/node_modules/.bin`` (default
``~/.local/share/hangar/harnesses``, installed by ``make harnesses``); a missing one fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulators.model import ModelStub

pytestmark = pytest.mark.harness

PROMPT = "please write the proof file"
FOLLOW_UP = "what did you do?"
PROOF = "made-by-stub"
SCENARIO = {
    "rules": [
        {
            "when": "write the proof file",
            "steps": [
                {"shell": f"echo {PROOF} > proof.txt && cat proof.txt"},
                {"text": "Wrote proof.txt."},
            ],
        },
        {"when": "what did you do", "steps": [{"text": "I answered: {prompt}"}]},
        {"when": "use your write tool", "steps": [
            {"tool": "write", "arguments": {"path": "note.txt", "content": "{prompt}\n"}},
            {"text": "Wrote note.txt."}]},  # fmt: skip
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}
TIMEOUT = 180
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}


def harness_bin(name: str) -> Path:
    root = Path(
        os.environ.get("HANGAR_HARNESS_DIR")
        or Path.home() / ".local" / "share" / "hangar" / "harnesses"
    )
    path = root / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.fail(
            f"harness CLI {name!r} not found at {path}: run `make harnesses` "
            "(or set HANGAR_HARNESS_DIR to a folder with node_modules/.bin/{claude,codex,pi})",
            pytrace=False,
        )
    return path


@dataclass
class Workspace:
    home: Path
    repo: Path
    stub: ModelStub

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: no real credentials leak in from the test runner."""
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **GIT_IDENTITY,
            **extra,
        }

    def run(self, argv: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
        """Run a CLI in the repo; assert it exits 0; return its stdout's JSON lines."""
        proc = subprocess.run(
            argv,
            cwd=self.repo,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert proc.returncode == 0, (
            f"{argv[0]} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def turn_requests(self, api: str) -> list[dict[str, Any]]:
        """Logged requests that offered tools (the agent loop, not side requests)."""
        return [r for r in self.stub.requests(api) if r["body"].get("tools")]


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    env = {**os.environ, **GIT_IDENTITY}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    with ModelStub(SCENARIO) as stub:
        yield Workspace(home=home, repo=repo, stub=stub)


def assert_first_turn(ws: Workspace, api: str, shell_tool: str) -> None:
    """The file was written, and the second request carried the tool call and its output."""
    assert (ws.repo / "proof.txt").read_text() == f"{PROOF}\n"
    requests = ws.turn_requests(api)
    assert len(requests) >= 2
    assert shell_tool in offered_tools(requests[0])
    entries = ModelStub.entries(requests[1]["body"])
    text = ModelStub.transcript(requests[1]["body"])
    assert f"prompt: {PROMPT}" in text
    calls = [e.text for e in entries if e.kind == "tool_call"]
    assert calls[0].startswith(f"{shell_tool} ") and "proof.txt" in calls[0], text
    tool_results = [e.text for e in entries if e.kind == "tool_result"]
    assert any(PROOF in result for result in tool_results), text


def assert_resumed_turn(ws: Workspace, api: str) -> None:
    """The resumed turn's request carries turn one's prompt and tool result, then the new one."""
    last = ws.turn_requests(api)[-1]
    entries = ModelStub.entries(last["body"])
    kinds = [e.kind for e in entries if e.kind != "context"]
    prompts = [e.text for e in entries if e.kind == "prompt"]
    assert prompts == [PROMPT, FOLLOW_UP]
    assert kinds[-1] == "prompt" and "tool_result" in kinds
    assert any(PROOF in e.text for e in entries if e.kind == "tool_result")


def offered_tools(request: dict[str, Any]) -> list[str]:
    names = []
    for tool in request["body"]["tools"]:
        function = tool.get("function")
        names.append((function or tool).get("name") or tool.get("type"))
    return names


def test_claude_code_runs_a_shell_step_and_resumes_with_its_conversation(
    workspace: Workspace,
) -> None:
    ws = workspace
    claude = str(harness_bin("claude"))
    env = ws.env(
        ANTHROPIC_BASE_URL=ws.stub.url,
        ANTHROPIC_API_KEY="sk-stub",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        IS_SANDBOX="1",
    )
    common = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        "claude-sonnet-4-5",
    ]
    session = str(uuid.uuid4())
    lines = ws.run([claude, "-p", PROMPT, "--session-id", session, *common], env)

    assert {line["session_id"] for line in lines if "session_id" in line} == {session}
    assert lines[0]["type"] == "system" and lines[0]["subtype"] == "init"
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"] == "Wrote proof.txt." and result["is_error"] is False
    assert_first_turn(ws, "anthropic", "Bash")
    [stored] = ws.home.glob(f".claude/projects/*/{session}.jsonl")

    lines = ws.run([claude, "-p", FOLLOW_UP, "--resume", session, *common], env)
    assert lines[-1]["result"] == f"I answered: {FOLLOW_UP}"
    assert lines[-1]["session_id"] == session
    assert_resumed_turn(ws, "anthropic")
    assert stored.exists()


def test_codex_runs_a_shell_step_and_resumes_with_its_conversation(workspace: Workspace) -> None:
    ws = workspace
    codex = str(harness_bin("codex"))
    (ws.home / ".codex").mkdir()
    (ws.home / ".codex" / "config.toml").write_text(
        'model = "gpt-5-codex"\n'
        'model_provider = "stub"\n'
        "\n"
        "[model_providers.stub]\n"
        'name = "stub"\n'
        f'base_url = "{ws.stub.url}/v1"\n'
        'env_key = "STUB_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    env = ws.env(STUB_API_KEY="sk-stub")
    flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    lines = ws.run([codex, "exec", *flags, PROMPT], env)

    assert lines[0]["type"] == "thread.started"
    thread = lines[0]["thread_id"]
    assert lines[-1]["type"] == "turn.completed"
    messages = [
        line["item"]["text"]
        for line in lines
        if line["type"] == "item.completed" and line["item"]["type"] == "agent_message"
    ]
    assert messages[-1] == "Wrote proof.txt."
    commands = [
        line["item"]
        for line in lines
        if line["type"] == "item.completed" and line["item"]["type"] == "command_execution"
    ]
    assert commands[0]["exit_code"] == 0 and PROOF in commands[0]["aggregated_output"]
    assert_first_turn(ws, "responses", "exec_command")
    [stored] = ws.home.glob(f".codex/sessions/*/*/*/rollout-*-{thread}.jsonl")

    lines = ws.run([codex, "exec", *flags, "resume", thread, FOLLOW_UP], env)
    assert lines[0] == {"type": "thread.started", "thread_id": thread}
    assert_resumed_turn(ws, "responses")
    assert stored.exists()


def pi_against_the_stub(ws: Workspace) -> tuple[list[str], dict[str, str]]:
    """pi's command (print mode, JSON lines, the stub's model) and environment."""
    agent_dir = ws.home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = {
        "providers": {
            "stub": {
                "baseUrl": f"{ws.stub.url}/v1",
                "api": "openai-completions",
                "apiKey": "STUB_API_KEY",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "stub-model", "contextWindow": 128000, "maxTokens": 16384}],
            }
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(models))
    env = ws.env(STUB_API_KEY="sk-stub", PI_OFFLINE="1")
    return [str(harness_bin("pi")), "-p", "--mode", "json", "--model", "stub/stub-model"], env


def test_pi_runs_a_shell_step_and_resumes_with_its_conversation(workspace: Workspace) -> None:
    ws = workspace
    pi, env = pi_against_the_stub(ws)
    agent_dir = ws.home / ".pi" / "agent"
    lines = ws.run([*pi, PROMPT], env)

    assert lines[0]["type"] == "session"
    session = lines[0]["id"]
    final = lines[-1]
    assert final["type"] == "agent_end"
    assert final["messages"][-1]["role"] == "assistant"
    assert final["messages"][-1]["content"] == [{"type": "text", "text": "Wrote proof.txt."}]
    assert_first_turn(ws, "chat", "bash")
    [stored] = agent_dir.glob(f"sessions/*/*_{session}.jsonl")

    lines = ws.run([*pi, "--session", session, FOLLOW_UP], env)
    assert lines[0]["id"] == session
    assert lines[-1]["messages"][-1]["content"][0]["text"] == f"I answered: {FOLLOW_UP}"
    assert_resumed_turn(ws, "chat")
    assert stored.exists()


def test_pi_calls_its_own_write_tool_when_a_tool_step_names_it(workspace: Workspace) -> None:
    ws = workspace
    pi, env = pi_against_the_stub(ws)
    lines = ws.run([*pi, "please use your write tool"], env)
    assert lines[-1]["messages"][-1]["content"] == [{"type": "text", "text": "Wrote note.txt."}]
    assert (ws.repo / "note.txt").read_text() == "please use your write tool\n"
    calls = [e.text for e in ModelStub.entries(ws.turn_requests("chat")[-1]["body"])
             if e.kind == "tool_call"]  # fmt: skip
    assert [c.split(" ", 1)[0] for c in calls] == ["write"]

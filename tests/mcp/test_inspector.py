"""hangar's MCP server through a client nobody here wrote: the MCP Inspector in CLI mode (pinned
by the Makefile's INSPECTOR_PACKAGE, installed by `make test`). It checks each result against
the tool's outputSchema, errors included, which the Python SDK's own client does not."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import IDENTITY
from tests.mcp.test_tools import TOOLS

# Each tool called so that it fails (or, for the listings, answers), with the code expected.
CALLS: dict[str, tuple[dict[str, str], str | None]] = {
    "new_session": ({"name": "x", "message": "hi", "env": "nope"}, "environment_not_found"),
    "list_sessions": ({}, None),
    "get_session": ({"ref": "nope"}, "session_not_found"),
    "open_session": ({"ref": "nope"}, "session_not_found"),
    "send_to_session": ({"ref": "nope", "message": "hi"}, "session_not_found"),
    "keep_session": ({"ref": "nope", "idle_minutes": "5"}, "session_not_found"),
    "suspend_session": ({"ref": "nope"}, "session_not_found"),
    "fork_session": ({"ref": "nope", "n": "1"}, "session_not_found"),
    "wait_for_turn": ({"ref": "nope", "timeout_seconds": "0"}, "session_not_found"),
    "get_artifact": ({"ref": "nope", "turn": "1", "path": "a.txt"}, "session_not_found"),
    "get_session_patch": ({"ref": "nope"}, "session_not_found"),
    "list_environments": ({}, None),
    "interrupt_session": ({"ref": "nope"}, "session_not_found"),
    "steer_session": ({"ref": "nope", "message": "hi"}, "session_not_found"),
    "approve": ({"ref": "nope", "approval": "a"}, "session_not_found"),
    "get_tree": ({"ref": "nope", "turn": "1", "step": "0"}, "session_not_found"),
    "get_transcript": ({"ref": "nope"}, "session_not_found"),
    "deny": ({"ref": "nope", "approval": "a", "message": "no"}, "session_not_found"),
    "archive_session": ({"ref": "nope"}, "session_not_found"),
    "delete_session": ({"ref": "nope"}, "session_not_found"),
}


@pytest.fixture
def backends() -> dict[str, str]:
    """The MCP surface is the same over every backend: the embedded ones are enough here."""
    return {}


def inspector() -> Path:
    root = Path(os.environ.get("HANGAR_TEST_TOOLS_DIR")
                or Path.home() / ".local" / "share" / "hangar" / "test-tools")  # fmt: skip
    cli = root / "node_modules" / ".bin" / "mcp-inspector"
    if not cli.exists():
        pytest.fail(f"the MCP Inspector is not installed in {root}: run `make test-tools` (or "
                    "`make test`, which installs it)", pytrace=False)  # fmt: skip
    return cli


def inspect(server: Server, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """``mcp-inspector --cli URL/mcp --transport http ARGS`` with the bearer header."""
    secret = token or (server.data_dir / "admin-token").read_text().strip()
    argv = [str(inspector()), "--cli", f"{server.url}/mcp", "--transport", "http",
            "--header", f"Authorization: Bearer {secret}", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, f"the Inspector failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def test_the_inspector_lists_every_tool_and_reads_each_ones_answer_and_errors(
    standin_server: Server, remote: Path
) -> None:
    standin_server.ok("env", "add", "app", "--repo", str(remote), *IDENTITY)
    listed = answer(inspect(standin_server, "--method", "tools/list"))["tools"]
    assert {t["name"] for t in listed} == TOOLS == set(CALLS)
    assert all(t["outputSchema"]["type"] == "object" for t in listed)

    def call(tool: str) -> tuple[str, Any]:
        pairs = [f"{k}={v}" for k, v in CALLS[tool][0].items()]
        done = inspect(standin_server, "--method", "tools/call", "--tool-name", tool,
                       *(["--tool-arg", *pairs] if pairs else []))  # fmt: skip
        return tool, answer(done)  # the Inspector checked it against the tool's outputSchema

    with ThreadPoolExecutor(4) as pool:  # each call is a Node process of its own
        results = dict(pool.map(call, CALLS))
    for tool, (_, code) in CALLS.items():
        result = results[tool]
        if code is None:
            assert not result.get("isError") and result["structuredContent"], (tool, result)
            continue
        assert result["isError"] is True and "structuredContent" not in result, (tool, result)
        line, body = result["content"][0]["text"], json.loads(result["content"][1]["text"])
        assert line.endswith(f"({code})") and body["error"]["code"] == code, (tool, result)


def test_the_inspector_shows_hangars_answer_to_a_wrong_token(
    standin_server: Server,
) -> None:
    done = inspect(standin_server, "--method", "tools/list", token="not-a-token")
    said = done.stdout + done.stderr
    assert done.returncode != 0  # and it shows hangar's answer, not a search for OAuth
    assert "the bearer token is not valid" in said and "Authorization: Bearer TOKEN" in said, said

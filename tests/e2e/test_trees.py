"""A turn's steps over the CLI against a real ``hangar serve``, with the real Claude Code and the
model stub: ``session get`` lists each step's tool and tree; ``session tree NAME TURN STEP``
shows a step's patch against the turn's start, after the sandbox is gone too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import MODELS, add_env, get
from tests.harness.test_trees import SCENARIO

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]


@pytest.fixture
def backends() -> dict[str, str]:
    """The surfaces are the same over every backend: the embedded ones are enough here."""
    return {}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def test_each_steps_patch_is_shown_days_later_without_the_sandbox(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    server.ok("session", "new", "steps", "two steps: go", "--env", "app", "--harness", "claude",
              "--model", MODELS["claude"], "-w")  # fmt: skip
    (turn,) = get(server, "steps")["turns"]
    assert [s["tool"] for s in turn["steps"]] == ["start", "Bash", "Bash"]
    assert "hangar session tree steps 1 1" in server.ok("session", "get", "steps")
    server.ok("session", "suspend", "steps")  # the sandbox goes: the steps stay
    transcript_of_a_real_turn(server)
    first = server.ok("session", "tree", "steps", "1", "1")
    assert "a.txt" in first and "+one" in first and "b.txt" not in first
    both = json.loads(server.ok("session", "tree", "steps", "1", "2", "--json"))
    assert both["encoding"] == "utf-8" and "+two" in both["patch"] and "+one" in both["patch"]
    assert both["tree"] == turn["steps"][2]["tree"] and not both["cut"]
    start = json.loads(server.ok("session", "tree", "steps", "1", "0", "--json"))
    assert start["patch"] == ""
    missing = server.cli("session", "tree", "steps", "1", "9")
    assert missing.returncode == 1 and "(invalid_input)" in missing.stderr, missing.stderr
    sealed = [p for p in server.data_dir.rglob("steps") if p.is_file()]
    assert sealed, "the steps were not kept in the blobs"
    server.ok("session", "delete", "steps")
    assert not [p for p in server.data_dir.rglob("steps") if p.is_file()]  # gone with it


def transcript_of_a_real_turn(server: Server) -> None:
    """REST's transcript of the turn, its sandbox gone: the person's message, Claude Code's two
    Bash calls with their results, its answer, then usage and the outcome."""
    token = (server.data_dir / "admin-token").read_text().strip()
    page = httpx.get(f"{server.url}/api/sessions/steps/log", params={"format": "events"},
                     headers={"Authorization": f"Bearer {token}"}, timeout=30).json()  # fmt: skip
    assert (page["harness"], page["finished"], page["more"]) == ("claude", True, False), page
    events = page["events"]
    assert events[0] == {"kind": "message", "role": "user", "text": "two steps: go", "context": []}
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = {e["id"]: e for e in events if e["kind"] == "tool_result"}
    assert [(c["name"], c["input"]["command"]) for c in calls] == [
        ("Bash", "echo one > a.txt"), ("Bash", "echo two > b.txt")]  # fmt: skip
    assert all(not results[c["id"]]["error"] for c in calls)
    assert {"kind": "message", "role": "assistant", "text": "Two steps done.",
            "context": []} in events  # fmt: skip
    assert [e["kind"] for e in events[-2:]] == ["usage", "outcome"]
    assert events[-1]["outcome"] == "exited" and events[-1]["reason"] is None
    assert events[-2]["input_tokens"] > 0 and "<hangar-exchange>" not in json.dumps(page)

"""A session moved from Claude Code to Codex and back (``--harness``), with the real CLIs and
the model stub: what each harness is sent shows the handoff account on Codex's first turn,
Codex's own resume on its second, and Claude's own conversation, with an account of the turns
it missed, when it comes back after a suspend and an open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from hangar.harnesses.handoff import MARKER
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import MODELS, TURN_ONE, add_env, get

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

TOOL_OUTPUT = "TOOL-OUTPUT-5d1e"
SCENARIO = {
    "rules": [  # the first rule found in the prompt wins: accounts quote earlier messages
        {"when": "CLAUDE-BACK", "steps": [{"shell": "cat codex.txt"}, {"text": "Claude back."}]},
        {"when": "CODEX-B", "steps": [{"text": "Codex B done."}]},
        {"when": "CODEX-A", "steps": [{"shell": "echo from-codex > codex.txt"},
                                      {"text": "Codex A done."}]},
        {"when": "turn one", "steps": [
            {"shell": "echo one > committed.txt && git add committed.txt && "
                      "git commit -qm 'first change'"},
            {"shell": f"echo {TOOL_OUTPUT}"},
            {"text": "Turn one done."}]},
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex"],
}  # fmt: skip


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def sent(stub: ModelStub, api: str) -> str:
    """The conversation of the last request of ``api`` that offered tools (a turn's, not a
    side request's)."""
    turns = [r for r in stub.requests(api) if r["body"].get("tools")]
    assert turns, f"no {api} request"
    return ModelStub.transcript(turns[-1]["body"])


def test_a_session_goes_from_claude_to_codex_and_back_keeping_each_conversation(
    real_server: Server, remote: Path, stub: ModelStub
) -> None:
    server = real_server
    add_env(server, remote, stub)
    server.ok("session", "new", "relay", TURN_ONE, "--env", "app", "--harness", "claude",
              "--model", MODELS["claude"], "-w")  # fmt: skip
    claude_conversation = get(server, "relay")["harness_session"]

    out = server.ok("session", "send", "relay", "CODEX-A: add a file", "--harness", "codex",
                    "--model", MODELS["codex"], "-w")  # fmt: skip
    assert out.strip() == "Codex A done."
    first = sent(stub, "responses")
    assert MARKER in first and f"Original task: {TURN_ONE}" in first
    assert "Turn one done." in first and "CODEX-A: add a file" in first
    assert TOOL_OUTPUT not in first  # an account, not Claude's conversation
    after_a = get(server, "relay")
    assert (after_a["harness"], after_a["model"]) == ("codex", MODELS["codex"])
    assert after_a["turns"][1]["handoff"] and after_a["turns"][1]["harness"] == "codex"
    codex_conversation = after_a["harness_session"]
    assert codex_conversation and codex_conversation != claude_conversation

    stub.clear_requests()
    server.ok("session", "send", "relay", "CODEX-B: and more", "-w")
    second = sent(stub, "responses")
    assert "CODEX-A: add a file" in second and "Codex A done." in second  # its own history
    assert second.count(MARKER) == 1 and "CODEX-B: and more" in second
    after_b = get(server, "relay")
    assert not after_b["turns"][2]["handoff"] and after_b["harness_session"] == codex_conversation

    server.ok("session", "suspend", "relay")
    assert server.sandboxes().list() == []
    opened = server.ok("session", "open", "relay", "--harness", "claude", "--model",
                       MODELS["claude"], "--json")  # fmt: skip
    assert '"harness": "claude"' in opened
    reopened = get(server, "relay")
    assert reopened["state"] == "idle" and reopened["harness_session"] == claude_conversation

    stub.clear_requests()
    out = server.ok("session", "send", "relay", "CLAUDE-BACK: carry on", "-w")
    assert out.strip() == "Claude back."
    back = sent(stub, "anthropic")
    assert TURN_ONE in back and TOOL_OUTPUT in back  # Claude's own conversation, restored
    assert "Turns you missed" in back and "CODEX-A: add a file" in back and "Codex B done." in back
    assert "from-codex" in back  # Codex's work is in the repo Claude carries on in
    final = get(server, "relay")
    assert final["harness_session"] == claude_conversation and final["turns"][3]["handoff"]
    assert final["conversations"] == {"claude": claude_conversation, "codex": codex_conversation}

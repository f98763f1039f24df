"""Live turns over the CLI and REST against a real ``hangar serve``, with the real Claude Code
and the model stub: ``session steer`` reaches the running turn, ``send --if-idle`` refuses
while it runs, ``steer --expected-turn`` refuses once the turn is over (REST 409
``turn_ended``), and a steer on an idle session starts the next turn; the steered turn's
conversation shows the steer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from emulators.model import ModelStub
from tests.e2e.conftest import Server
from tests.e2e.test_acceptance import MODELS, add_env, get, until
from tests.harness.test_live_turns import GO, SCENARIO, STARTED, STEER

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]


@pytest.fixture
def backends() -> dict[str, str]:
    """The surfaces are the same over every backend: the embedded ones are enough here."""
    return {}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def rest(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    token = (server.data_dir / "admin-token").read_text().strip()
    return httpx.post(server.url + path, json=body, timeout=60,
                      headers={"Authorization": f"Bearer {token}"})  # fmt: skip


def test_steer_and_if_idle_over_the_cli_and_rest(real_server: Server, remote: Path,
                                                 stub: ModelStub) -> None:  # fmt: skip
    server = real_server
    add_env(server, remote, stub)
    server.ok("session", "new", "live", "held turn: run the long job", "--env", "app",
              "--harness", "claude", "--model", MODELS["claude"])  # fmt: skip
    box = server.sandboxes()
    until(lambda: any(box.exec(s.id, ["test", "-e", STARTED]).ok for s in box.list()), 240)
    busy = server.cli("session", "send", "live", "another task", "--if-idle")
    assert busy.returncode == 1 and "(session_busy)" in busy.stderr, busy.stderr
    steered = server.ok("session", "steer", "live", STEER, "--expected-turn", "1")
    assert "steered turn 1" in steered
    [sandbox] = box.list()
    box.exec(sandbox.id, ["touch", GO])
    assert server.ok("session", "wait", "live").strip() == "Steered and done."
    assert [t["outcome"] for t in get(server, "live")["turns"]] == ["exited"]
    ended = rest(server, "/api/sessions/live/steer", {"message": "late", "expected_turn": 1})
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "turn_ended"
    started = rest(server, "/api/sessions/live/steer", {"message": "after the interrupt"})
    assert started.status_code == 202 and (started.json()["turn"],
                                           started.json()["delivered"]) == (2, "turn")  # fmt: skip
    assert server.ok("session", "wait", "live").strip() == "Resumed after the interrupt."
    assert any(STEER in json.dumps(r["body"]) for r in stub.requests("anthropic"))
    # turn 1's conversation shows the steer it was given, before the answer to it; the late
    # steer it refused is not there
    log = server.ok("session", "log", "live", "--turn", "1", "--format", "events")
    said = [e for e in map(json.loads, log.splitlines()) if e["kind"] == "message"]
    assert said[0] == {"kind": "message", "role": "user", "text": "held turn: run the long job",
                       "context": []}  # fmt: skip
    steers = [i for i, e in enumerate(said) if e.get("steer")]
    assert [said[i] for i in steers] == [{"kind": "message", "role": "user", "text": STEER,
                                          "context": [], "steer": True}]  # fmt: skip
    assert said[-1]["text"] == "Steered and done." and steers[0] < len(said) - 1

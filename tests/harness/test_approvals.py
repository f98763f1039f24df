"""Approvals in a live turn's driver with the real Claude Code and the model stub: asked before
a command (``--permission-prompt-tool stdio``), the driver publishes the request as a signed
``hangar.approval`` line in the run log and waits; approve runs the command once, deny keeps it
from running (the model is told); a decision for an unknown or decided approval is refused; a
line the CLI forges is not signed."""

from __future__ import annotations

import json
from collections.abc import Iterator
import uuid
from dataclasses import replace
from typing import Any

import pytest

from emulators.model import ModelStub
from hangar.agent import commands
from hangar.harnesses.turns import turn_result
from hangar.processes.runs import read_run
from tests.harness.conftest import Agent
from tests.harness.test_live_turns import Live, until

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

RAN = "/tmp/ran.txt"
PUSHED, TESTS = "/tmp/pushed.txt", "/tmp/tests.txt"
SCENARIO = {
    "rules": [{"when": "asked turn", "steps": [{"shell": f"echo ran >> {RAN}"},
                                               {"text": "Asked turn done."}]},
              {"when": "risky turn", "steps": [
                  {"shell": f"git push --force origin main; touch {PUSHED}"},
                  {"shell": f"echo tests ran >> {TESTS}"},
                  {"text": "Risky turn done."}]}],  # fmt: skip
    "models": ["claude-sonnet-4-5", "gpt-5-codex"],
}


@pytest.fixture(scope="module")
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def approvals(live: Live) -> list[dict[str, Any]]:
    """The driver's signed approval requests in the run log so far."""
    log = read_run(live.sandboxes, live.sandbox, live.run_id).data
    found = []
    for line in log.splitlines():
        if b'"hangar.approval"' in line:
            fields = commands.verify_event(live.key, live.run_id, json.loads(line))
            if fields is not None:
                found.append(fields)
    return found


@pytest.fixture
def live(agent: Agent) -> Live:
    return Live(agent)


@pytest.mark.parametrize("agent", ["claude", "codex"], indirect=True)
@pytest.mark.parametrize("allow", [True, False])
def test_a_command_waits_for_its_approval_and_runs_once_or_never(live: Live, stub: ModelStub,
                                                                 allow: bool) -> None:  # fmt: skip
    spec = replace(live.agent.spec("asked turn: run it", new_id=str(uuid.uuid4())), asks=True)
    live.start(spec)
    asked: list[dict[str, Any]] = []
    until("an approval request", lambda: bool(asked.extend(approvals(live)) or asked), 120)
    (request,) = asked
    assert request["tool"] in ("Bash", "commandExecution") and RAN in json.dumps(request["input"])
    assert not live.exists(RAN)  # it waits
    unknown = live.command("decide", {"approval": "no-such-id", "allow": True})
    assert (unknown.status, unknown.detail) == ("refused", "no such approval waits")
    answer = live.command("decide", {"approval": request["id"], "allow": allow,
                                     "message": "not this one"})  # fmt: skip
    assert answer.status == "delivered"
    log, code = live.finish(spec)
    result = turn_result(live.sandboxes, live.sandbox, live.agent.harness, spec, live.run_id,
                         log, code)  # fmt: skip
    assert result.ok and result.summary == "Asked turn done.", log[-2000:]
    ran = live.sandboxes.exec(live.sandbox, ["cat", RAN])
    assert ran.stdout == (b"ran\n" if allow else b"")
    if not allow and live.agent.harness.name == "claude":  # (Codex's answer carries no words)
        told = [r for r in stub.requests("anthropic") if "not this one" in json.dumps(r["body"])]
        assert told, "the model was not told of the denial"

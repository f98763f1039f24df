"""Live turns driven by hangar's driver (:mod:`hangar.agent.driver`) against the real CLIs and the
model stub, in local sandboxes: each turn is held in a long shell tool call until the test lets
it go. A steer mid-turn reaches the model in the same turn; an interrupt ends the turn with
status 130 within seconds and the conversation resumes after; commands forged, replayed or
unsigned by anyone but hangar are refused and change nothing; a command after the turn's end
does not land."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from emulators.model import ModelStub
from hangar.agent import commands
from hangar.errors import TurnEnded
from hangar.harnesses import TurnSpec
from hangar.harnesses.turns import start_turn, turn_result
from hangar.processes import control
from hangar.processes.runs import read_run, run_dir, wait_run
from hangar.sandboxes import SandboxUser
from tests.harness.conftest import API, TURN_TIMEOUT, Agent

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

STARTED, GO = "/tmp/held-started", "/tmp/held-go"
HOLD = f"touch {STARTED}; for i in $(seq 1200); do [ -f {GO} ] && break; sleep 0.1; done; echo HELD-DONE"
STEER = "steer-words-4c1e: also say the magic word"
SCENARIO = {
    "rules": [
        {"when": "steer-words", "steps": [{"text": "Steered and done."}]},
        {"when": "held turn", "steps": [{"shell": HOLD}, {"text": "Held turn done."}]},
        {"when": "after the interrupt", "steps": [{"text": "Resumed after the interrupt."}]},
        {"when": "quick turn", "steps": [{"shell": "echo quick"}, {"text": "Quick turn done."}]},
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}


@pytest.fixture(scope="module")
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


def until(what: str, check: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Live:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.sandbox, _ = agent.engine.sandbox()
        self.sandboxes = agent.engine.sandboxes
        self.key = commands.new_key()
        self.run_id = ""
        self.seq = 0

    def start(self, spec: TurnSpec) -> None:
        self.run_id, self.seq = f"run-{uuid.uuid4().hex[:8]}", 0
        start_turn(self.sandboxes, self.sandbox, self.agent.harness, spec, self.run_id, self.key)

    def exists(self, path: str, user: SandboxUser = SandboxUser.AGENT) -> bool:
        return self.sandboxes.exec(self.sandbox, ["test", "-e", path], user=user).ok

    def command(self, kind: control.Kind, body: dict[str, str]) -> control.Answer:
        self.seq += 1
        command_id = control.land(self.sandboxes, self.sandbox, self.run_id, self.key, self.seq,
                                  kind, body)  # fmt: skip
        found: list[control.Answer] = []

        def answered() -> bool:
            got, _ = control.answers(self.sandboxes, self.sandbox, self.run_id, self.key)
            found[:] = [a for a in got if a.id == command_id]
            return bool(found)

        until(f"an answer to {kind}", answered, 30)
        return found[0]

    def finish(self, spec: TurnSpec) -> tuple[bytes, int]:
        log, code = wait_run(self.sandboxes, self.sandbox, self.run_id, timeout=TURN_TIMEOUT)
        return log, code


@pytest.fixture
def live(agent: Agent) -> Live:
    return Live(agent)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"], indirect=True)
def test_a_steer_mid_turn_reaches_the_model_in_the_same_turn(live: Live, stub: ModelStub) -> None:
    name = live.agent.harness.name
    spec = live.agent.spec("held turn: run the long job", new_id=str(uuid.uuid4()))
    live.start(spec)
    until("the long tool call", lambda: live.exists(STARTED))
    answer = live.command("steer", {"message": STEER})
    assert answer.status == "delivered"
    live.sandboxes.exec(live.sandbox, ["touch", GO])
    log, code = live.finish(spec)
    result = turn_result(live.sandboxes, live.sandbox, live.agent.harness, spec, live.run_id,
                         log, code)  # fmt: skip
    assert result.ok, log.decode(errors="replace")[-2000:]
    assert result.summary == "Steered and done."
    if name == "claude":
        assert result.conversation_id == spec.new_id
    assert sum(result.usage.values()) > 0  # (each CLI names its counts its own way)
    after = [r for r in stub.requests(API[name]) if STEER in json.dumps(r["body"])]
    assert after, "no model request carried the steer"
    with pytest.raises(TurnEnded):  # the turn is over: a late command does not land
        control.land(live.sandboxes, live.sandbox, live.run_id, live.key, 9, "steer",
                     {"message": "too late"})  # fmt: skip


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"], indirect=True)
def test_an_interrupt_ends_the_turn_with_130_and_the_conversation_goes_on(live: Live) -> None:
    spec = live.agent.spec("held turn: run the long job", new_id=str(uuid.uuid4()))
    live.start(spec)
    until("the long tool call", lambda: live.exists(STARTED))
    assert live.command("interrupt", {}).status == "delivered"
    log, code = live.finish(spec)
    assert code == 130, log.decode(errors="replace")[-2000:]
    first = turn_result(live.sandboxes, live.sandbox, live.agent.harness, spec, live.run_id,
                        log, 0).conversation_id  # (the status aside: the conversation it named)
    assert first
    again = live.agent.spec("after the interrupt: carry on", conversation_id=first)
    live.start(again)
    log, code = live.finish(again)
    result = turn_result(live.sandboxes, live.sandbox, live.agent.harness, again, live.run_id,
                         log, code)  # fmt: skip
    assert result.ok and result.summary == "Resumed after the interrupt.", log[-2000:]


@pytest.mark.parametrize("agent", ["claude"], indirect=True)
def test_commands_not_signed_by_hangar_are_refused_and_change_nothing(live: Live,
                                                                      stub: ModelStub) -> None:  # fmt: skip
    spec = live.agent.spec("held turn: run the long job", new_id=str(uuid.uuid4()))
    live.start(spec)
    until("the long tool call", lambda: live.exists(STARTED))
    ctl = f"{run_dir(live.run_id)}/ctl"
    # The agent cannot even reach the control folder.
    for argv in (["ls", ctl], ["sh", "-c", f"echo x > {ctl}/in/1.json"],
                 ["sh", "-c", f"echo x >> {ctl}/acks"]):  # fmt: skip
        assert not live.sandboxes.exec(live.sandbox, argv).ok, argv
    # Forged (another key), unsigned and replayed commands placed by hangar's own user.
    other = commands.new_key()
    _, forged = commands.command_bytes(other, live.run_id, 1, "steer", {"message": "forged"})
    unsigned = json.dumps({"seq": 1, "kind": "interrupt", "id": "x", "body": {}, "mac": ""})
    steer_id, steer = commands.command_bytes(live.key, live.run_id, 1, "steer", {"message": STEER})
    # the same signed command twice: the second is a replay
    for data in (forged, unsigned.encode(), steer, steer):
        live.sandboxes.exec(live.sandbox, ["sh", "-c", f"cat > {ctl}/tmp/x && mv {ctl}/tmp/x "
                                           f"{ctl}/in/1.json"], stdin=data,
                            user=SandboxUser.HANGAR)  # fmt: skip
        until("the command taken",
              lambda: not live.exists(f"{ctl}/in/1.json", SandboxUser.HANGAR), 30)
    got: list[control.Answer] = []

    def four() -> bool:
        got[:] = control.answers(live.sandboxes, live.sandbox, live.run_id, live.key)[0]
        return len(got) >= 4

    until("four answers", four, 30)
    assert sorted(a.status for a in got) == ["delivered", "refused", "refused", "refused"]
    assert [a.detail for a in got if a.id == steer_id] == ["", "replayed"]
    assert read_run(live.sandboxes, live.sandbox, live.run_id).exit_code is None  # still on
    live.sandboxes.exec(live.sandbox, ["touch", GO])
    log, code = live.finish(spec)
    assert code == 0 and b"forged" not in log
    steered = [r for r in stub.requests(API["claude"]) if STEER in json.dumps(r["body"])]
    assert len({json.dumps(r["body"]).count(STEER) for r in steered}) == 1  # once, not twice

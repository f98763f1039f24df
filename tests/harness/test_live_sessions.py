"""Live turns through the session service, against the real Claude Code and Codex and the model
stub in local sandboxes: a plain send while a live turn runs steers it (one turn, the steer in
a request of that turn); ``if_idle`` and ``expected_turn`` refuse as the rules say; a steer on
an idle session is a send; a control plane restarted mid-turn (a new service over the same
db) steers and interrupts the running turn, which ends ``interrupted``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import SessionBusy, TurnEnded
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, TurnOutcome
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.service import SessionService
from tests.conftest import GIT_IDENTITY
from tests.harness.conftest import API, MODELS, harness_dir
from tests.harness.test_live_turns import GO, SCENARIO, STARTED, STEER
from tests.unit.sessions.world import FakeTicks

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

LIMIT = 240.0


@pytest.fixture(scope="module")
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


class World:
    def __init__(self, tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
                 remote: Path, stub: ModelStub) -> None:  # fmt: skip
        self.settings = Settings.build(data_dir=tmp_path / "data", harness_dir=harness_dir())
        self.db, self.blobs, self.keys = db, blobs, keys
        self.sandboxes = LocalSandboxes(tmp_path / "sandboxes", harness_dir())
        self.ticks = FakeTicks()
        self.service = self.make()
        endpoint = {"ANTHROPIC_BASE_URL": stub.url, "OPENAI_BASE_URL": f"{stub.url}/v1"}
        self.service.environments.add("app", str(remote), vars={**GIT_IDENTITY, **endpoint},
                                      secrets={"ANTHROPIC_API_KEY": "sk-stub",
                                               "OPENAI_API_KEY": "sk-stub"},
                                      host_ports=[stub.port])  # fmt: skip

    def make(self) -> SessionService:
        return SessionService(self.settings, self.db, self.blobs, self.keys, self.sandboxes,
                              self.ticks)  # fmt: skip

    def held(self, name: str) -> None:
        """A bounded wait until the session's turn is in its long tool call."""
        deadline = time.monotonic() + LIMIT
        while True:
            session = self.service.resolve(name)
            if session.sandbox_id and self.sandboxes.exec(session.sandbox_id,
                                                          ["test", "-e", STARTED]).ok:  # fmt: skip
                return
            assert time.monotonic() < deadline, "the turn never reached its tool call"
            time.sleep(0.2)

    def release(self, name: str) -> None:
        sandbox = self.service.resolve(name).sandbox_id
        assert sandbox is not None
        self.sandboxes.exec(sandbox, ["touch", GO])


@pytest.fixture
def world(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
          stub: ModelStub) -> Iterator[World]:  # fmt: skip
    made = World(tmp_path, db, blobs, keys, remote, stub)
    made.ticks.start(made.service.handle_tick)
    yield made
    made.ticks.stop()
    for info in made.sandboxes.list():
        made.sandboxes.destroy(info.id)


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_a_send_to_a_running_live_turn_steers_it_and_the_rules_hold(
    name: str, world: World, stub: ModelStub
) -> None:
    s = world.service
    s.new("live", "held turn: run the long job", "app", harness=name, model=MODELS[name])
    world.held("live")
    with pytest.raises(SessionBusy):
        s.send("live", "start another", if_idle=True)
    steered = s.send("live", STEER)
    assert (steered.turn, steered.delivered) == (1, "steer")
    world.release("live")
    turn = s.wait("live", 1, timeout=LIMIT, poll=0.2)
    assert turn.outcome is TurnOutcome.EXITED, turn
    assert turn.summary == "Steered and done."
    assert len(s.db.list_turns(s.resolve("live").id)) == 1
    assert any(STEER in json.dumps(r["body"]) for r in stub.requests(API[name]))
    with pytest.raises(TurnEnded):
        s.steer("live", "too late", expected_turn=1)
    assert len(s.db.list_turns(s.resolve("live").id)) == 1  # nothing changed
    again = s.steer("live", "after the interrupt: a new turn")
    assert (again.turn, again.delivered) == (2, "turn")
    assert s.wait("live", 2, timeout=LIMIT, poll=0.2).summary == "Resumed after the interrupt."


def test_a_restarted_control_plane_steers_and_interrupts_the_running_turns(
    world: World, stub: ModelStub
) -> None:
    for name in ("steered", "stopped"):
        world.service.new(name, "held turn: run the long job", "app", harness="claude",
                          model=MODELS["claude"])  # fmt: skip
    for name in ("steered", "stopped"):
        world.held(name)
    world.ticks.stop()
    world.service = restarted = world.make()  # nothing kept in memory: the db and the sandbox
    world.ticks = FakeTicks()
    world.ticks.start(restarted.handle_tick)
    late = STEER + " (after the restart)"
    assert restarted.steer("steered", late, expected_turn=1).delivered == "steer"
    restarted.interrupt("stopped")
    turn = restarted.wait("stopped", 1, timeout=LIMIT, poll=0.2)
    assert turn.outcome is TurnOutcome.INTERRUPTED and turn.exit_code == 130, turn
    assert restarted.resolve("stopped").state is SessionState.IDLE
    world.release("steered")
    first = restarted.wait("steered", 1, timeout=LIMIT, poll=0.2)
    assert first.outcome is TurnOutcome.EXITED and first.summary == "Steered and done.", first
    assert any(late in json.dumps(r["body"]) for r in stub.requests(API["claude"]))


def test_messages_sent_while_the_session_starts_join_its_turn_in_order(
    world: World, stub: ModelStub
) -> None:
    s = world.service
    started = s.new("early", "quick turn: a short job", "app", harness="claude",
                    model=MODELS["claude"])  # fmt: skip
    assert started.session.state is SessionState.STARTING
    first, second = "steer-words: first early word 1a", "steer-words: second early word 2b"
    answers = [s.send("early", first), s.send("early", second)]
    assert [(a.turn, a.delivered) for a in answers] == [(1, "steer"), (1, "steer")]
    turn = s.wait("early", 1, timeout=LIMIT, poll=0.2)
    assert turn.outcome is TurnOutcome.EXITED, turn
    assert len(s.db.list_turns(s.resolve("early").id)) == 1
    last = [ModelStub.transcript(r["body"]) for r in stub.requests(API["claude"])
            if r["body"].get("tools") and first in json.dumps(r["body"])][-1]  # fmt: skip
    assert last.index(first) < last.index(second)


def test_steers_sent_as_the_turn_ends_are_carried_once_by_it_or_by_the_next(
    world: World, stub: ModelStub
) -> None:
    s = world.service
    s.new("edge", "held turn: run the long job", "app", harness="claude",
          model=MODELS["claude"])  # fmt: skip
    world.held("edge")
    world.release("edge")  # the turn goes on to its end while the steers come
    sent: list[tuple[str, int, str]] = []
    deadline = time.monotonic() + LIMIT
    while not sent or sent[-1][2] != "turn":  # steer until one comes after the turn's end
        assert time.monotonic() < deadline, "the turn never ended"
        text = f"steer-words: edge {len(sent)} e{len(sent)}x"
        answer = s.send("edge", text)
        sent.append((text, answer.turn, answer.delivered))
    last = s.wait("edge", sent[-1][1], timeout=LIMIT, poll=0.2)
    assert last.outcome is TurnOutcome.EXITED, last
    assert len(sent) >= 2 and [d for _, _, d in sent[:-1]] == ["steer"] * (len(sent) - 1)
    final = [ModelStub.transcript(r["body"]) for r in stub.requests(API["claude"])
             if r["body"].get("tools") and sent[-1][0] in json.dumps(r["body"])][-1]  # fmt: skip
    for text, _, _ in sent:  # each one reached the agent, exactly once
        assert final.count(text) == 1, (text, sent, final[-3000:])

"""A turn stopped before it ended keeps the conversation its harness had written: the real Claude
Code, Codex and pi, through the session service in local sandboxes, against the model stub.

A first turn that ran a command and then waits on the model (the stub holds its answer) ends
``timed_out`` by the idle limit, shortened to seconds; the next turn resumes that conversation,
with no account of the session, and the model sees the first turn's prompt and tool result. A pi
turn stopped while its first answer is held, before pi wrote its session file, is followed by a
new conversation with the account, never by a resume of one that is nowhere. A turn
interrupted in the middle of a command (a tool call that never returned) is resumed by the
next turn, which works."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Turn, TurnOutcome
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.service import SessionService
from tests.conftest import GIT_IDENTITY
from tests.harness.conftest import API, MODELS, harness_dir
from tests.unit.sessions.world import FakeTicks

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

MARK = "TOOL-RESULT-5d1e"
STARTED = "/tmp/long-command-started"
HELD = 600  # seconds the stub holds an answer back: for good, as far as a turn is concerned
SCENARIO = {
    "rules": [  # the first whose words the prompt holds (a handoff's quotes the first turn's)
        {"when": "turn two", "steps": [{"text": "Turn two done."}]},
        {"when": "turn one", "steps": [{"shell": f"echo one > one.txt && echo {MARK}"},
                                       {"text": "never said", "delay": HELD}]},  # fmt: skip
        {"when": "held at once", "steps": [{"text": "never said", "delay": HELD}]},
        {"when": "turn mid", "steps": [{"shell": f"touch {STARTED} && sleep {HELD}"},
                                       {"text": "never said"}]},  # fmt: skip
    ],
    "models": ["claude-sonnet-4-5", "gpt-5-codex", "stub-model"],
}
IDLE_MINUTES = 0.2  # twelve seconds: longer than a CLI's start, silent, on a busy machine
TURN_LIMIT = 240.0  # seconds: a real CLI in a sandbox, on a machine running other suites


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def live_turns() -> bool:
    """Whether turns run live (a test parametrizes it to try the one-shot turns' stop)."""
    return True


@pytest.fixture
def service(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
            stub: ModelStub, live_turns: bool) -> Iterator[SessionService]:  # fmt: skip
    settings = Settings.build(data_dir=tmp_path / "data", harness_dir=harness_dir(),
                              activity_grace_seconds=0, live_turns=live_turns,
                              turn_idle_minutes=IDLE_MINUTES)  # fmt: skip
    sandboxes = LocalSandboxes(tmp_path / "sandboxes", harness_dir())
    ticks = FakeTicks()
    service = SessionService(settings, db, blobs, keys, sandboxes, ticks)
    endpoint = {"ANTHROPIC_BASE_URL": stub.url, "OPENAI_BASE_URL": f"{stub.url}/v1"}
    service.environments.add("app", str(remote), vars={**GIT_IDENTITY, **endpoint},
                             secrets={"ANTHROPIC_API_KEY": "sk-stub", "OPENAI_API_KEY": "sk-stub"},
                             host_ports=[stub.port])  # fmt: skip
    ticks.start(service.handle_tick)
    yield service
    ticks.stop()
    assert not ticks.errors, ticks.errors
    for info in sandboxes.list():
        sandboxes.destroy(info.id)


def ended(service: SessionService, name: str) -> Turn:
    turn = service.wait(name, timeout=TURN_LIMIT, poll=0.2)
    assert turn.finished_at is not None, f"turn {turn.n} of {name} did not end"
    return turn


def asked(stub: ModelStub, api: str, text: str, timeout: float = TURN_LIMIT) -> None:
    """A bounded wait until the model has been asked with ``text`` in a request offering tools."""
    deadline = time.monotonic() + timeout
    while not any(text in ModelStub.transcript(r["body"]) for r in stub.requests(api)
                  if r["body"].get("tools")):  # fmt: skip
        assert time.monotonic() < deadline, f"the model was never asked {text!r}"
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["claude", "codex", "pi"])
def test_a_timed_out_first_turn_is_resumed_by_the_next_turn(
    name: str, service: SessionService, stub: ModelStub
) -> None:
    service.new("stopped", "turn one: start the work", "app", harness=name, model=MODELS[name])
    first = ended(service, "stopped")
    assert first.outcome is TurnOutcome.TIMED_OUT, first
    assert (first.summary or "").startswith("the turn had no output for 12 seconds"), first
    assert first.harness_session, "the harness had written its conversation"
    assert service.resolve("stopped").harness_session == first.harness_session

    service.send("stopped", "turn two: carry on")
    second = ended(service, "stopped")
    assert second.outcome is TurnOutcome.EXITED, second
    assert second.summary == "Turn two done." and not second.handoff
    assert second.harness_session == first.harness_session
    sent = [ModelStub.transcript(r["body"]) for r in stub.requests(API[name])
            if r["body"].get("tools")][-1]  # fmt: skip
    assert sent.index("turn one: start the work") < sent.index(MARK) < sent.index("turn two")


@pytest.mark.parametrize("live_turns", [False])  # a live turn's abort lets pi write it first
def test_a_pi_turn_interrupted_before_pi_wrote_its_conversation_is_followed_by_a_new_one(
    service: SessionService, stub: ModelStub
) -> None:
    service.new("early", "held at once", "app", harness="pi", model=MODELS["pi"])
    asked(stub, "chat", "held at once")
    service.interrupt("early")
    first = ended(service, "early")
    assert first.outcome is TurnOutcome.INTERRUPTED and first.exit_code == 130, first
    assert first.harness_session is None  # pi names its session file at its first answer
    assert service.resolve("early").harness_session is None

    service.send("early", "turn two: carry on")
    second = ended(service, "early")
    assert second.outcome is TurnOutcome.EXITED, second
    assert second.summary == "Turn two done." and second.handoff
    assert second.harness_session and service.resolve("early").harness_session == (
        second.harness_session)  # fmt: skip


@pytest.mark.parametrize("name", ["claude", "codex", "pi"])
def test_a_turn_interrupted_in_the_middle_of_a_command_is_followed_by_a_turn_that_works(
    name: str, service: SessionService, stub: ModelStub
) -> None:
    service.new("mid", "turn mid: run the long command", "app", harness=name,
                model=MODELS[name])  # fmt: skip
    deadline = time.monotonic() + TURN_LIMIT  # a bounded wait until the command runs
    while True:
        sandbox = service.resolve("mid").sandbox_id
        if sandbox and service.sandboxes.exec(sandbox, ["test", "-e", STARTED]).ok:
            break
        assert time.monotonic() < deadline, "the long command never started"
        time.sleep(0.2)
    service.interrupt("mid")
    first = ended(service, "mid")
    assert first.outcome is TurnOutcome.INTERRUPTED and first.exit_code == 130, first

    service.send("mid", "turn two: carry on")
    second = ended(service, "mid")
    assert second.outcome is TurnOutcome.EXITED, second
    assert second.summary == "Turn two done."
    sent = [ModelStub.transcript(r["body"]) for r in stub.requests(API[name])
            if r["body"].get("tools")][-1]  # fmt: skip
    assert sent.index("turn mid: run the long command") < sent.index("turn two")
    # The conversation was resumed, not retold: each CLI had written it before the command.
    assert first.harness_session and not second.handoff
    assert second.harness_session == first.harness_session

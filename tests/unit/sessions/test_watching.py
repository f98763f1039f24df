"""Following a turn for MCP's wait_for_turn says something while nothing happens: a client that
drops a call with no progress (Claude Code aborts an HTTP MCP tool that sent none for
CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT, 300 s by default) must keep waiting through a long setup, a
silent command or a slow model response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from hangar.models import Phase, Session, SessionState, StartStep, Turn, utcnow
from hangar.sessions.watching import TurnWatch


@dataclass
class Records:
    session: Session

    def resolve(self, ref: str) -> Session:
        return self.session


@dataclass
class Turns:
    """The two reads a look makes: the turn and its session, as a test sets them."""

    session: Session
    turn: Turn
    records: Records = field(init=False)

    def __post_init__(self) -> None:
        self.records = Records(self.session)

    def wait(self, ref: str, n: int | None, timeout: float) -> Turn:
        return self.turn

    def set(self, session: Session, turn: Turn) -> None:
        self.session, self.turn, self.records.session = session, turn, session


def starting(step: StartStep | None) -> tuple[Session, Turn]:
    session = Session(name="s", environment="app", harness="claude",
                      state=SessionState.STARTING,
                      phase=Phase(step=step) if step else None)  # fmt: skip
    return session, Turn(session_id=session.id, n=1, message="m")


def watch(turns: Turns, quiet: float) -> TurnWatch:
    return TurnWatch(cast(Any, turns), cast(Any, None), "s", quiet=quiet)


def messages(w: TurnWatch) -> list[str]:
    return [note.message for note in w.look().notes]


def test_a_quiet_wait_says_its_last_note_again() -> None:
    turns = Turns(*starting(StartStep.CLONING))
    w = watch(turns, quiet=0.0)
    assert messages(w) == ["cloning the repo"]
    assert messages(w) == ["cloning the repo"]  # nothing new: said again
    turns.set(*starting(StartStep.RUNNING_SETUP))
    assert messages(w) == ["running the environment's setup"]
    assert messages(w) == ["running the environment's setup"]


def test_a_wait_repeats_nothing_before_it_has_been_quiet_that_long() -> None:
    w = watch(Turns(*starting(StartStep.CLONING)), quiet=3600.0)
    assert messages(w) == ["cloning the repo"]
    assert messages(w) == []


def test_a_wait_with_nothing_said_yet_says_what_it_waits_for() -> None:
    w = watch(Turns(*starting(None)), quiet=0.0)
    assert messages(w) == ["waiting for turn 1"]


def test_a_finished_turn_is_not_said_again() -> None:
    session, turn = starting(StartStep.CLONING)
    turns = Turns(session, turn)
    w = watch(turns, quiet=0.0)
    assert messages(w) == ["cloning the repo"]
    now = utcnow()
    turns.set(session.model_copy(update={"state": SessionState.IDLE, "phase": None}),
              turn.model_copy(update={"started_at": now, "finished_at": now}))  # fmt: skip
    look = w.look()
    assert look.done and look.notes == []

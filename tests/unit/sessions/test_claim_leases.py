"""Claim leases that hold while their work goes on: a claim counts its lease from when it is
written (a contended database can take longer than the lease to write it), a lease kept through
a block survives a renewal that fails, a start step whose read of its run waits on the
sandbox keeps its lease meanwhile, and a finish taken over halfway leaves its waiter waiting,
not failing. Time is the test's own clock where the code takes one; nothing sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hangar.config import Settings
from hangar.db.records import modify_session
from hangar.db.sqlite import SqliteDb
from hangar.errors import SessionBusy, VersionConflict
from hangar.models import Claim, ClaimKind, Phase, Session, SessionState as S, StartIntent
from hangar.models import Environment, StartKind, StartStep, TurnOutcome, utcnow
from hangar.sessions import turns as turns_module
from hangar.sessions.sandbox import RunState
from hangar.sessions.schedule import StartTick
from hangar.sessions.startup import Startup
from hangar.sessions.transitions import Transitions
from tests.unit.sessions.world import World, start

LEASE = 3.0
TOKEN = "t0ken"


class Clock:
    """The test's time: it moves only when told to."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class SlowWrites:
    """The db, its first session write taking ``took`` seconds of ``clock`` (a contended
    database; the writes after it are quick), or its first ``conflicts`` failing with
    VersionConflict; counts the writes that landed."""

    def __init__(self, db: SqliteDb, clock: Clock, took: float = 0.0, conflicts: int = 0) -> None:
        self.db, self.clock, self.took, self.conflicts = db, clock, took, conflicts
        self.writes = 0
        self.landed = threading.Condition()

    def update_session(self, session: Session) -> Session:
        if self.conflicts > 0:
            self.conflicts -= 1
            raise VersionConflict("contention (the test's); re-read and try again")
        self.clock.now += timedelta(seconds=self.took)
        self.took = 0.0
        written = self.db.update_session(session)
        with self.landed:
            self.writes += 1
            self.landed.notify_all()
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def stored(db: SqliteDb, state: S, clock: Callable[[], datetime], *,
           claim_for: float | None = None) -> Session:  # fmt: skip
    """A session in ``state`` holding, when ``claim_for`` is given, a START claim (token TOKEN)
    whose lease ends ``claim_for`` seconds from the clock's now."""
    claim = None
    if claim_for is not None:
        claim = Claim(kind=ClaimKind.START, by="test", token=TOKEN,
                      until=clock() + timedelta(seconds=claim_for))  # fmt: skip
    return db.create_session(Session(
        name=f"s-{state.value}", environment="app", harness="claude", state=state, claim=claim,
        phase=Phase(step=StartStep.CLONING), start=StartIntent(kind=StartKind.OPEN),
        sandbox_id="sbx-00000000"))  # fmt: skip


CLAIMING: dict[str, tuple[S, float | None, Callable[[Transitions, Session], Session]]] = {
    "claim_start": (S.IDLE, None, lambda t, s: t.claim_start(s, StartIntent(kind=StartKind.OPEN))),
    "claim_finish": (S.ACTIVE, None, lambda t, s: t.claim_finish(s)),
    "claim_suspend": (S.IDLE, None, lambda t, s: t.claim_suspend(s)),
    "claim_archive": (S.IDLE, None, lambda t, s: t.claim_archive(s)),
    "take_over": (S.STARTING, -1.0, lambda t, s: t.take_over(s)),
    "advance": (S.STARTING, LEASE, lambda t, s: t.advance(s, TOKEN, StartStep.RESTORING)),
}


@pytest.mark.parametrize("name", list(CLAIMING))
def test_a_claim_whose_write_outlasts_its_lease_lands_renewed_and_is_not_anyones_to_take(
    db: SqliteDb, name: str
) -> None:
    clock = Clock()
    state, claim_for, call = CLAIMING[name]
    session = stored(db, state, clock, claim_for=claim_for)
    slow = SlowWrites(db, clock, took=LEASE + 2)  # longer than the lease: it would land expired
    claimed = call(Transitions(slow, LEASE, clock), session)  # type: ignore[arg-type]
    assert claimed.claim is not None and claimed.claim.until > clock()
    assert db.get_session(session.id) == claimed
    other = Transitions(db, LEASE, clock)
    with pytest.raises(SessionBusy):
        other.take_over(claimed)  # the claim tick, come due: the holder has only begun
    if claimed.state is S.ACTIVE:
        with pytest.raises(SessionBusy):
            other.claim_finish(claimed)  # another waiter on the same turn's end


def test_a_claim_written_in_good_time_is_written_once(db: SqliteDb) -> None:
    clock = Clock()
    session = stored(db, S.IDLE, clock)
    quick = SlowWrites(db, clock, took=LEASE / 10)
    claimed = Transitions(quick, LEASE, clock).claim_suspend(session)  # type: ignore[arg-type]
    assert quick.writes == 1
    assert claimed.claim is not None and claimed.claim.until == clock() + timedelta(
        seconds=LEASE - LEASE / 10)  # fmt: skip


def test_a_kept_lease_is_renewed_on_after_renewals_that_failed(db: SqliteDb) -> None:
    # The keeper's own pace (real time), with a short lease and a bounded wait on an event.
    session = stored(db, S.STARTING, utcnow, claim_for=60)
    flaky = SlowWrites(db, Clock(), conflicts=2)  # two renewals lose to contention first
    transitions = Transitions(flaky, lease_seconds=0.3)  # type: ignore[arg-type]
    with transitions.keeping(session.id, TOKEN):
        with flaky.landed:
            renewed = flaky.landed.wait_for(lambda: flaky.writes >= 2, timeout=30)
    assert renewed, "the keeper gave up after a failed renewal: the lease would run out"
    assert db.get_session(session.id).claim.token == TOKEN  # type: ignore[union-attr]


@pytest.mark.sandbox
def test_a_wait_whose_finish_is_taken_over_halfway_waits_for_the_turn_instead_of_failing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = start(world)
    original = turns_module.take_checkpoint
    taken: list[str] = []

    def taken_over_first(*args: Any, **kwargs: Any) -> Any:
        session: Session = args[2]
        if not taken:  # the first finisher's claim goes to a worker that then died
            def stolen(current: Session) -> dict[str, Any]:
                assert current.claim is not None
                return {"claim": current.claim.model_copy(update={
                    "token": "a-worker-that-died", "until": utcnow() - timedelta(seconds=1)})}
            taken.append(modify_session(world.db, session.id, stolen).id)
        return original(*args, **kwargs)

    monkeypatch.setattr(turns_module, "take_checkpoint", taken_over_first)
    world.service.send(name, "run: echo two > two.txt")
    turn = world.service.wait(name, timeout=60, poll=0.05)
    assert taken, "no finish reached its checkpoint"
    assert turn.n == 2 and turn.outcome is TurnOutcome.EXITED, turn
    assert world.service.resolve(name).state is S.IDLE
    assert not world.ticks.errors, world.ticks.errors


class LateRunState:
    """A provisioner whose run's state comes late (a follower slow to its first frame): it
    answers once a write landed on the session while it waited (the keeper's renewal), or
    after a bounded wait; ``renewed`` says which."""

    def __init__(self, writes: SlowWrites) -> None:
        self.writes = writes
        self.renewed: bool | None = None

    def run_state(self, session: Session, run_id: str) -> RunState:
        with self.writes.landed:
            self.renewed = self.writes.landed.wait_for(lambda: self.writes.writes >= 1,
                                                       timeout=10)  # fmt: skip
        return RunState(started=True)


class Steps:
    """The schedule's start steps, remembered."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, str, float]] = []

    def start_step(self, session_id: str, token: str, seconds: float = 0.0) -> None:
        self.steps.append((session_id, token, seconds))


class OneEnvironment:
    def require(self, name: str) -> Environment:
        return Environment(name=name, repo="https://example.invalid/app.git")


def test_a_start_step_keeps_its_lease_while_the_runs_state_comes_late(
    db: SqliteDb, settings: Settings
) -> None:
    # The keeper's own pace (real time), with a short lease; the claim itself ends far ahead,
    # so only a renewal's write can end the provisioner's bounded wait early.
    session = stored(db, S.STARTING, utcnow, claim_for=60)
    writes = SlowWrites(db, Clock())
    late, steps = LateRunState(writes), Steps()
    transitions = Transitions(writes, lease_seconds=0.3)  # type: ignore[arg-type]
    # Only what a poll of a run uses is given.
    startup = Startup(settings, writes, None, OneEnvironment(), late,  # type: ignore[arg-type]
                      None, None, None, transitions, steps, None)  # type: ignore[arg-type]
    startup.step(StartTick(session=session.id, token=TOKEN))
    assert late.renewed, "the lease was not renewed while the run's state was read"
    after = db.get_session(session.id)
    assert after.state is S.STARTING and after.claim is not None and after.claim.token == TOKEN
    assert [s[:2] for s in steps.steps] == [(session.id, TOKEN)]  # the poll comes back

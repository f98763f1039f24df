"""A turn is held to its limits: one with no output for HANGAR_TURN_IDLE_MINUTES, or running
past its time limit (the send's, else its environment's, else HANGAR_TURN_TIMEOUT_MINUTES), is
stopped and ends ``timed_out`` saying which limit ran out; its work is checkpointed as after any
turn, the session is IDLE, and the next send works. The Antigravity stand-in hangs (saying
nothing) after its ``run:`` lines on a prompt holding HANG; the limits are a few seconds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidInput
from hangar.keys.local import LocalKeys
from hangar.models import CheckpointReason, Repair, SessionState, Turn, TurnOutcome, utcnow
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.timeouts import overdue
from tests.unit.sessions.world import World, make_world, start

pytestmark = pytest.mark.sandbox

HANG = "and now hang"


def hanging(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
            **settings: float) -> Iterator[World]:  # fmt: skip
    for world in make_world(tmp_path, db, blobs, keys, remote, **settings):
        world.service.environments.update("app", EnvironmentChange(vars={
            "AGY_STANDIN_HANG_ON": HANG}))  # fmt: skip
        yield world


@pytest.fixture
def world(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
          remote: Path) -> Iterator[World]:  # fmt: skip
    yield from hanging(tmp_path, db, blobs, keys, remote, turn_idle_minutes=2 / 60)


@pytest.fixture
def patient(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
            remote: Path) -> Iterator[World]:  # fmt: skip
    """The default idle limit (15 minutes): only a time limit stops a turn here."""
    yield from hanging(tmp_path, db, blobs, keys, remote)


def ended(world: World, name: str = "demo") -> Turn:
    turn = world.service.wait(name, timeout=60, poll=0.05)
    assert turn.finished_at is not None, turn
    return turn


def test_a_turn_with_no_output_for_the_idle_limit_ends_timed_out_checkpointed_and_the_next_send_works(
    world: World,
) -> None:
    service = world.service
    start(world)
    service.send("demo", f"run: echo late > late.txt\n{HANG}")
    turn = ended(world)
    assert turn.outcome is TurnOutcome.TIMED_OUT and turn.exit_code == 130, turn
    assert turn.summary is not None
    assert turn.summary.startswith("the turn had no output for 2 seconds"), turn.summary
    assert turn.error_code is None
    session = service.resolve("demo")
    assert session.state is SessionState.IDLE and session.claim is None
    assert session.error is not None and "no output for 2 seconds" in session.error
    # Its work is in the turn's checkpoint, as after any turn.
    newest = world.db.list_checkpoints(session.id)[-1]
    assert newest.reason is CheckpointReason.TURN and newest.ts >= turn.finished_at
    patch = b"".join(service.checkpointer.contents(newest).read("session.patch"))
    assert b"late.txt" in patch and b"+late" in patch

    service.send("demo", "run: cat late.txt > seen.txt")
    after = ended(world)
    assert after.outcome is TurnOutcome.EXITED, after
    assert world.sh("demo", "cat seen.txt") == "late\n"
    assert service.resolve("demo").error is None


def test_a_turn_past_its_time_limit_ends_timed_out_the_sends_limit_before_the_environments(
    patient: World,
) -> None:
    world, service = patient, patient.service
    start(world)
    service.environments.update("app", EnvironmentChange(turn_timeout_minutes=1 / 60))
    service.send("demo", f"run: echo one more > more.txt\n{HANG}")
    turn = ended(world)
    assert turn.outcome is TurnOutcome.TIMED_OUT and turn.timeout_minutes == 1 / 60, turn
    assert (turn.summary or "").startswith("the turn timed out after 1 second"), turn.summary
    assert world.sh("demo", "cat more.txt") == "one more\n"

    service.send("demo", HANG, turn_timeout_minutes=3 / 60)
    turn = ended(world)
    assert turn.outcome is TurnOutcome.TIMED_OUT and turn.timeout_minutes == 3 / 60, turn
    assert (turn.summary or "").startswith("the turn timed out after 3 seconds"), turn.summary

    service.environments.update("app", EnvironmentChange(turn_timeout_minutes=None))
    service.send("demo", "run: echo fine > fine.txt")
    turn = ended(world)
    assert turn.outcome is TurnOutcome.EXITED and turn.timeout_minutes == 120, turn
    assert service.resolve("demo").state is SessionState.IDLE


@pytest.mark.parametrize("minutes", [0, -1, 10_081])
def test_a_time_limit_outside_a_week_is_refused_before_anything_starts(
    patient: World, minutes: float
) -> None:
    service = patient.service
    with pytest.raises(InvalidInput, match="time limit"):
        service.new("demo", "hi", "app", harness="antigravity", turn_timeout_minutes=minutes)
    with pytest.raises(InvalidInput, match="time limit"):
        service.environments.update("app", EnvironmentChange(turn_timeout_minutes=minutes))
    assert service.environments.get("app").turn_timeout_minutes is None
    assert patient.db.list_sessions() == []


def test_the_time_limit_comes_before_the_idle_limit_a_recorded_reason_stands_and_a_repair_run_has_its_own(
    tmp_path: Path,
) -> None:
    settings = Settings.build(data_dir=tmp_path, turn_idle_minutes=1)
    now = utcnow()
    late = Turn(session_id="s", n=1, message="m", started_at=now - timedelta(minutes=61),
                timeout_minutes=60)  # fmt: skip
    assert overdue(settings, late, 3600, now) == "the turn timed out after 60 minutes"
    fresh = late.model_copy(update={"started_at": now})
    assert overdue(settings, fresh, 60, now) == "the turn had no output for 1 minute"
    assert overdue(settings, fresh, 59, now) is None
    assert overdue(settings, fresh, None, now) is None  # the sandbox could not say
    told = fresh.model_copy(update={"stopped_for": "the turn had no output for 15 minutes"})
    assert overdue(settings, told, 0, now) == told.stopped_for
    repairing = late.model_copy(update={"repair": Repair(run_id="r", reason="why")})
    assert overdue(settings, repairing, 3600, now) is None
    unlimited = late.model_copy(update={"timeout_minutes": None})  # an older record
    assert overdue(settings, unlimited, 0, now) is None  # 120 minutes, the setting's

"""Being told about turns: a turn's end, with HANGAR_NOTIFY_URL set, reaches a real local
receiver as a signed event through the ``notify`` tick; without it nothing is scheduled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import TurnOutcome
from hangar.sessions.environments import EnvironmentChange
from tests.unit.sessions.receiver import SECRET, WAIT, Receiver
from tests.unit.sessions.world import AUTO_KINDS, World, make_world


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def told(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
    receiver: Receiver,
) -> Iterator[World]:
    for world in make_world(tmp_path, db, blobs, keys, remote, notify_url=receiver.url,
                            notify_secret=SECRET):  # fmt: skip
        world.ticks.auto = AUTO_KINDS | {"notify"}
        yield world


def test_a_turn_that_asks_and_then_one_that_ends_are_each_told_once_signed(
    told: World, receiver: Receiver
) -> None:
    ask = ('turn one\nrun: mkdir -p "$HANGAR_IO/out" && '
           'echo "Which one?" > "$HANGAR_IO/out/QUESTION.md"')
    told.service.new("demo", ask, "app", harness="antigravity")
    first = told.service.wait("demo", timeout=WAIT, poll=0.05)
    assert first.outcome is TurnOutcome.NEEDS_INPUT, first
    [asked] = receiver.wait_for(1)

    told.service.send("demo", "turn two\nrun: echo two > two.txt")
    second = told.service.wait("demo", timeout=WAIT, poll=0.05)
    assert second.outcome is TurnOutcome.EXITED, second
    got = receiver.wait_for(2)

    session = told.service.resolve("demo")
    assert asked["signed"] and asked["body"]["event"] == "needs_input"
    assert asked["body"]["summary"] == "Which one?" and asked["body"]["turn"] == 1
    assert got[1]["signed"] and got[1]["body"]["event"] == "turn_finished"
    assert (got[1]["body"]["session"], got[1]["body"]["session_id"]) == ("demo", session.id)
    assert got[1]["body"]["turn"] == 2 and len(got) == 2
    assert told.ticks.errors == []


def test_without_a_notify_url_a_turns_end_schedules_nothing(world: World) -> None:
    world.service.new("demo", "turn one\nrun: echo one > one.txt", "app", harness="antigravity")
    turn = world.service.wait("demo", timeout=WAIT, poll=0.05)

    assert turn.outcome is TurnOutcome.EXITED
    assert not [k for k in world.ticks.due if k.startswith("notify:")]
    assert "notify" not in world.ticks.auto  # (a notify tick would have stayed in ``due``)


def test_an_environments_own_notify_url_is_told_instead_of_the_global_one(
    told: World, receiver: Receiver
) -> None:
    own = Receiver()
    try:
        told.service.environments.update("app", EnvironmentChange(notify_url=own.url))
        told.service.new("demo", "turn one\nrun: echo one > one.txt", "app", harness="antigravity")
        told.service.wait("demo", timeout=WAIT, poll=0.05)
        [event] = own.wait_for(1)
        assert event["signed"] and event["body"]["event"] == "turn_finished"
        assert receiver.got == []  # not the global one
    finally:
        own.close()

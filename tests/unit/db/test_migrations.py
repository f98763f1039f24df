"""Records an older hangar wrote are brought up to date once: turn counts and last summaries
filled in, idle timeouts out of range brought back to a week."""

from __future__ import annotations

from hangar.db.sqlite import SqliteDb
from hangar.models import Conversation, TurnOutcome
from hangar.db.migrations import migrate
from hangar.testing.db import at, make_session, make_turn


def test_migrate_fills_in_turn_counts_and_last_summaries_once(db: SqliteDb) -> None:
    old = db.create_session(make_session("old", harness_session="conv-1"))
    for n, summary in ((1, "first"), (2, "second")):
        db.add_turn(make_turn(old.id, n, finished_at=at(n + 1), summary=summary,
                                 outcome=TurnOutcome.EXITED))  # fmt: skip
    db.add_turn(make_turn(old.id, 3))  # still running: its summary is not the last one
    empty = db.create_session(make_session("empty", minute=1))
    current = db.create_session(make_session("current", minute=2, turn_count=7,
                                             last_summary="kept"))  # fmt: skip

    broken = db.create_session(make_session("broken", minute=3, turn_count=1, idle_minutes=1e308))

    assert migrate(db) == 3
    assert db.get_session(broken.id).idle_minutes == 10_080
    assert (db.get_session(old.id).turn_count, db.get_session(old.id).last_summary) == (
        3, "second")  # fmt: skip
    assert db.get_session(old.id).conversations == {"claude": Conversation(id="conv-1",
                                                                           last_turn=3)}
    assert (db.get_session(empty.id).turn_count, db.get_session(empty.id).last_summary) == (
        0, None)  # fmt: skip
    assert db.get_session(current.id) == current  # written by this version: untouched
    again = {s.id: s.version for s in db.list_sessions()}
    assert migrate(db) == 0
    assert {s.id: s.version for s in db.list_sessions()} == again

"""The conformance suite of the db port: every backend runs it.

Subclass :class:`DbConformance` in a test module and give it a fixture named ``db`` that yields
a fresh, empty backend and closes it afterwards::

    class TestSqliteDb(DbConformance):
        @pytest.fixture
        def db(self, tmp_path: Path) -> Iterator[Db]:
            opened = SqliteDb(tmp_path / "hangar.db")
            yield opened
            opened.close()

The suite only uses the :class:`~hangar.db.Db` protocol, so it says nothing about how a backend
stores things. Timestamps are fixed (not "now") so orderings are exact, and carry microseconds so
that a backend that rounds them fails.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hangar.db import Db
from hangar.errors import (
    AlreadyExists,
    CheckpointNotFound,
    EnvironmentNotFound,
    InvalidState,
    NameTaken,
    NotFound,
    SessionNotFound,
    TokenNotFound,
    VersionConflict,
)
from hangar.models import (
    Checkpoint,
    CheckpointPart,
    Claim,
    ClaimKind,
    CheckpointReason,
    Compression,
    Environment,
    Session,
    SessionDetail,
    SessionState,
    TickDue,
    Token,
    Turn,
    TurnOutcome,
)

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
"""The suite's clock: every record's timestamps are minutes after this."""

_THREAD_TIMEOUT = 30.0


def at(minutes: float) -> datetime:
    """``T0`` plus ``minutes``."""
    return T0 + timedelta(minutes=minutes)


def make_session(name: str, minute: float = 0, **fields: Any) -> Session:
    """A session named ``name`` created ``minute`` minutes after T0."""
    values: dict[str, Any] = {
        "name": name,
        "environment": "env",
        "harness": "claude",
        "created_at": at(minute),
        "last_active_at": at(minute),
        "updated_at": at(minute),
    }
    values.update(fields)
    return Session(**values)


def make_turn(session_id: str, n: int, **fields: Any) -> Turn:
    values: dict[str, Any] = {
        "session_id": session_id,
        "n": n,
        "message": f"turn {n}",
        "started_at": at(n),
    }
    values.update(fields)
    return Turn(**values)


def make_checkpoint(session_id: str, minute: float, **fields: Any) -> Checkpoint:
    """A checkpoint of ``session_id`` taken ``minute`` minutes after T0."""
    values: dict[str, Any] = {
        "session_id": session_id,
        "ts": at(minute),
        "reason": CheckpointReason.TURN,
        "wrapped_key": "a2V5",
    }
    values.update(fields)
    return Checkpoint(**values)


def make_token(secret_hash: str, minute: float = 0, **fields: Any) -> Token:
    return Token(secret_hash=secret_hash, created_at=at(minute), **fields)


def make_due(key: str, minute: float, **fields: Any) -> TickDue:
    return TickDue(key=key, kind="idle", due_at=at(minute), **fields)


def _sessions(db: Db, *ids: str) -> None:
    """Create sessions with these ids (checkpoints can only be recorded for a live session)."""
    for n, session_id in enumerate(ids):
        db.create_session(make_session(f"owner-{n}", id=session_id))


def _ids(records: list[Session] | list[Checkpoint] | list[Token]) -> list[str]:
    return [record.id for record in records]


class DbConformance:
    """Behaviour every :class:`~hangar.db.Db` backend must show. Needs a ``db`` fixture."""

    # ------------------------------------------------------------------ sessions

    def test_create_session_returns_a_new_record_at_version_1_and_leaves_the_argument_alone(
        self, db: Db
    ) -> None:
        session = make_session("alpha")
        created = db.create_session(session)
        assert created.version == 1
        assert created is not session
        assert session.version == 0
        assert created == session.model_copy(update={"version": 1})

    def test_get_session_returns_the_stored_record(self, db: Db) -> None:
        created = db.create_session(make_session("alpha"))
        assert db.get_session(created.id) == created

    def test_get_of_an_unknown_session_id_raises_session_not_found(self, db: Db) -> None:
        with pytest.raises(SessionNotFound):
            db.get_session("ses-00000000")

    def test_find_session_looks_a_session_up_by_name(self, db: Db) -> None:
        db.create_session(make_session("alpha"))
        beta = db.create_session(make_session("beta"))
        assert db.find_session("beta") == beta

    def test_find_of_an_unknown_name_raises_session_not_found(self, db: Db) -> None:
        db.create_session(make_session("alpha"))
        with pytest.raises(SessionNotFound):
            db.find_session("beta")

    def test_create_with_a_taken_name_raises_name_taken_and_stores_nothing(
        self, db: Db
    ) -> None:
        first = db.create_session(make_session("alpha"))
        second = make_session("alpha", minute=1)
        with pytest.raises(NameTaken):
            db.create_session(second)
        with pytest.raises(SessionNotFound):
            db.get_session(second.id)
        assert db.find_session("alpha") == first

    def test_create_with_a_taken_id_raises_already_exists_and_stores_nothing(
        self, db: Db
    ) -> None:
        first = db.create_session(make_session("alpha"))
        with pytest.raises(AlreadyExists):
            db.create_session(make_session("beta", id=first.id))
        with pytest.raises(SessionNotFound):
            db.find_session("beta")
        assert db.get_session(first.id) == first

    def test_list_sessions_is_newest_first_by_created_at(self, db: Db) -> None:
        a = db.create_session(make_session("a", minute=1))
        c = db.create_session(make_session("c", minute=3))
        b = db.create_session(make_session("b", minute=2))
        assert _ids(db.list_sessions()) == [c.id, b.id, a.id]

    def test_paging_sees_every_session_once_newest_first_ties_by_id(self, db: Db) -> None:
        made = [db.create_session(make_session(f"p{i:03d}", minute=i // 3)) for i in range(25)]
        expected = sorted(made, key=lambda s: (s.created_at, s.id), reverse=True)
        seen: list[Session] = []
        after = None
        while page := db.page_sessions(7, after):
            assert len(page) <= 7
            seen += page
            after = (page[-1].created_at, page[-1].id)
        assert [s.id for s in seen] == [s.id for s in expected]
        assert db.page_sessions(0) == []

    def test_a_session_made_while_paging_never_comes_twice(self, db: Db) -> None:
        for i in range(6):
            db.create_session(make_session(f"q{i}", minute=i))
        first = db.page_sessions(3)
        db.create_session(make_session("newest", minute=59))  # lands before the first page
        rest = db.page_sessions(10, (first[-1].created_at, first[-1].id))
        names = [s.name for s in first + rest]
        assert names == ["q5", "q4", "q3", "q2", "q1", "q0"]

    def test_a_page_by_state_holds_only_that_state_newest_first(self, db: Db) -> None:
        idle = [db.create_session(make_session(f"i{n}", n, state=SessionState.IDLE))
                for n in range(3)]  # fmt: skip
        db.create_session(make_session("active", 5, state=SessionState.ACTIVE))
        db.create_session(make_session("failed", 6, state=SessionState.FAILED))
        assert _ids(db.page_sessions(10, state=SessionState.IDLE)) == _ids(idle[::-1])
        assert _ids(db.page_sessions(2, state=SessionState.IDLE)) == _ids(idle[:0:-1])
        assert db.page_sessions(10, state=SessionState.ARCHIVED) == []

    def test_a_page_by_prefix_holds_only_the_names_that_start_with_it_exactly(
        self, db: Db
    ) -> None:
        # above U+F8FF too, which the usual `prefix + "\uf8ff"` bound would miss
        names = ["ab", "a", "ab-1", "aa", "abc", "ac", "Ab-2", "ab\uf8ff", "xab", "ab\U0001f600"]
        for n, name in enumerate(names):
            db.create_session(make_session(name, n))

        def named(prefix: str | None) -> list[str]:
            return [s.name for s in db.page_sessions(50, prefix=prefix)]

        assert named("ab") == ["ab\U0001f600", "ab\uf8ff", "abc", "ab-1", "ab"]
        assert named("Ab") == ["Ab-2"]  # case-sensitive
        assert named("ab-1") == ["ab-1"] and named("ab-10") == []
        assert named("a\U0010ffff") == [] and named("zz") == []
        assert named("") == named(None) == names[::-1]
        assert [s.name for s in db.page_sessions(2, prefix="ab")] == ["ab\U0001f600", "ab\uf8ff"]

    def test_a_page_by_state_and_prefix_holds_what_both_keep(self, db: Db) -> None:
        first = db.create_session(make_session("a-1", 1, state=SessionState.IDLE))
        db.create_session(make_session("a-2", 2, state=SessionState.ACTIVE))
        db.create_session(make_session("b-1", 3, state=SessionState.IDLE))
        last = db.create_session(make_session("a-3", 4, state=SessionState.IDLE))
        found = db.page_sessions(10, state=SessionState.IDLE, prefix="a-")
        assert _ids(found) == [last.id, first.id]
        assert db.page_sessions(10, state=SessionState.ACTIVE, prefix="b") == []

    def test_paging_120_sessions_with_filters_in_pages_of_50_sees_each_match_once(
        self, db: Db
    ) -> None:
        def state_of(i: int) -> SessionState:
            if i % 7 == 0:
                return SessionState.FAILED
            return SessionState.SUSPENDED if i % 4 == 0 else SessionState.IDLE

        made = [db.create_session(make_session(f"{'b' if i % 6 == 0 else 'a'}-{i:03d}", i // 8,
                                               state=state_of(i)))
                for i in range(120)]  # fmt: skip (eight share each instant: ties by id)
        newest = sorted(made, key=lambda s: (s.created_at, s.id), reverse=True)
        idle = SessionState.IDLE
        for state, prefix in ((idle, None), (None, "a-"), (idle, "a-")):
            expected = [s.id for s in newest if s.name.startswith(prefix or "")
                        and state in (None, s.state)]  # fmt: skip
            assert len(expected) > 50, (state, prefix)  # more than a page
            seen: list[str] = []
            after = None
            while page := db.page_sessions(50, after, state=state, prefix=prefix):
                assert len(page) <= 50
                seen += _ids(page)
                after = (page[-1].created_at, page[-1].id)
            assert seen == expected, (state, prefix)

    def test_paging_by_prefix_through_sessions_made_at_one_instant_goes_by_id(
        self, db: Db
    ) -> None:
        # the names run against the ids, and others made at that instant lie between
        states = [SessionState.IDLE, SessionState.FAILED]
        made = [db.create_session(make_session(f"t-{9 - i}", 0, id=f"ses-{i:02d}",
                                               state=states[i % 2]))
                for i in range(10)]  # fmt: skip
        for i in range(10):
            db.create_session(make_session(f"u-{i}", 0, id=f"ses-{i:02d}x"))
        for state in (None, SessionState.IDLE):
            seen: list[Session] = []
            after = None
            while page := db.page_sessions(3, after, state=state, prefix="t-"):
                seen += page
                after = (page[-1].created_at, page[-1].id)
            assert _ids(seen) == [s.id for s in made[::-1] if state in (None, s.state)]

    def test_paging_by_activity_sees_each_match_once_most_recently_active_first(
        self, db: Db
    ) -> None:
        states = [SessionState.IDLE, SessionState.ACTIVE]
        made = [db.create_session(make_session(f"{'ab'[i % 3 == 0]}-{i:02d}", i,
                                               last_active_at=at(100 - i // 3 * 2),
                                               state=states[i % 2]))
                for i in range(20)]  # fmt: skip (three share each instant: ties by id)
        recent = sorted(made, key=lambda s: (s.last_active_at, s.id), reverse=True)
        for state, prefix in ((None, None), (SessionState.IDLE, None), (None, "a-"),
                              (SessionState.ACTIVE, "a-")):  # fmt: skip
            expected = [s.id for s in recent if s.name.startswith(prefix or "")
                        and state in (None, s.state)]  # fmt: skip
            seen: list[str] = []
            after = None
            while page := db.page_sessions(2, after, state=state, prefix=prefix,
                                           order="activity"):  # fmt: skip
                seen += _ids(page)
                after = (page[-1].last_active_at, page[-1].id)
            assert seen == expected, (state, prefix)

    def test_a_session_active_while_paging_by_activity_never_comes_twice(self, db: Db) -> None:
        made = [db.create_session(make_session(f"r{i}", i)) for i in range(6)]
        first = db.page_sessions(3, order="activity")
        assert [s.name for s in first] == ["r5", "r4", "r3"]
        seen = made[4].model_copy(update={"last_active_at": at(60)})  # seen on the first page
        db.update_session(seen)
        unseen = db.update_session(made[0].model_copy(update={"last_active_at": at(61)}))
        rest = db.page_sessions(10, (first[-1].last_active_at, first[-1].id), order="activity")
        assert [s.name for s in rest] == ["r2", "r1"]  # r4 not again; r0 moved up
        top = db.page_sessions(2, order="activity")
        assert _ids(top) == [unseen.id, seen.id]
        assert _ids(db.page_sessions(10)) == _ids(made[::-1])  # creation order unchanged

    def test_sessions_of_an_environment_are_only_its_own_and_at_most_limit(self, db: Db) -> None:
        mine = [db.create_session(make_session(f"m{i}", minute=i, environment="app"))
                for i in range(3)]  # fmt: skip
        db.create_session(make_session("other", minute=9, environment="web"))
        assert _ids(db.sessions_of_environment("app", 10)) == [s.id for s in reversed(mine)]
        assert len(db.sessions_of_environment("app", 2)) == 2
        assert db.sessions_of_environment("nothing", 10) == []

    def test_list_sessions_of_an_empty_db_is_empty(self, db: Db) -> None:
        assert db.list_sessions() == []

    def test_list_sessions_returns_only_the_given_states(self, db: Db) -> None:
        idle = db.create_session(make_session("idle", 1, state=SessionState.IDLE))
        db.create_session(make_session("active", 2, state=SessionState.ACTIVE))
        suspended = db.create_session(make_session("gone", 3, state=SessionState.SUSPENDED))
        listed = db.list_sessions(states=[SessionState.IDLE, SessionState.SUSPENDED])
        assert _ids(listed) == [suspended.id, idle.id]
        assert db.list_sessions(states=[SessionState.ARCHIVED]) == []

    def test_list_sessions_with_an_empty_state_list_returns_nothing(self, db: Db) -> None:
        db.create_session(make_session("alpha"))
        assert db.list_sessions(states=[]) == []

    def test_list_sessions_returns_at_most_limit_keeping_the_newest(self, db: Db) -> None:
        created = [db.create_session(make_session(f"s{i}", minute=i)) for i in range(5)]
        listed = db.list_sessions(limit=2)
        assert _ids(listed) == [created[4].id, created[3].id]
        filtered = db.list_sessions(states=[SessionState.STARTING], limit=3)
        assert _ids(filtered) == [created[4].id, created[3].id, created[2].id]

    def test_update_session_bumps_the_version_and_returns_a_new_object(self, db: Db) -> None:
        created = db.create_session(make_session("alpha"))
        changed = created.model_copy(update={"title": "renamed", "state": SessionState.IDLE})
        updated = db.update_session(changed)
        assert updated.version == 2
        assert updated is not changed
        assert changed.version == 1
        assert updated.title == "renamed"
        assert db.get_session(created.id) == updated
        again = db.update_session(updated.model_copy(update={"title": "again"}))
        assert again.version == 3
        assert db.get_session(created.id) == again

    def test_update_with_a_stale_version_raises_version_conflict_and_changes_nothing(
        self, db: Db
    ) -> None:
        created = db.create_session(make_session("alpha"))
        current = db.update_session(created.model_copy(update={"title": "first"}))
        with pytest.raises(VersionConflict):
            db.update_session(created.model_copy(update={"title": "second"}))
        assert db.get_session(created.id) == current

    def test_update_of_a_missing_session_raises_session_not_found(self, db: Db) -> None:
        ghost = make_session("ghost").model_copy(update={"version": 1})
        with pytest.raises(SessionNotFound):
            db.update_session(ghost)
        with pytest.raises(SessionNotFound):
            db.find_session("ghost")

    def test_update_of_a_deleted_session_raises_not_found(self, db: Db) -> None:
        created = db.create_session(make_session("alpha"))
        db.delete_session(created.id)
        with pytest.raises(NotFound):
            db.update_session(created.model_copy(update={"title": "late"}))

    def test_rename_to_a_taken_name_raises_name_taken_and_changes_nothing(
        self, db: Db
    ) -> None:
        alpha = db.create_session(make_session("alpha"))
        beta = db.create_session(make_session("beta", minute=1))
        with pytest.raises(NameTaken):
            db.update_session(beta.model_copy(update={"name": "alpha"}))
        assert db.get_session(beta.id) == beta
        assert db.find_session("alpha") == alpha

    def test_rename_frees_the_old_name(self, db: Db) -> None:
        alpha = db.create_session(make_session("alpha"))
        renamed = db.update_session(alpha.model_copy(update={"name": "omega"}))
        assert db.find_session("omega") == renamed
        with pytest.raises(SessionNotFound):
            db.find_session("alpha")
        db.create_session(make_session("alpha", minute=1))
        assert db.find_session("alpha").id != alpha.id

    def test_delete_session_removes_it_with_its_turns_and_checkpoints(self, db: Db) -> None:
        _sessions(db, "ses-1", "ses-other")
        session = db.create_session(make_session("alpha"))
        db.add_turn(make_turn(session.id, 1))
        checkpoint = make_checkpoint(session.id, 1)
        db.record_checkpoint(checkpoint, keep=5)
        db.delete_session(session.id)
        with pytest.raises(SessionNotFound):
            db.get_session(session.id)
        with pytest.raises(SessionNotFound):
            db.find_session("alpha")
        assert db.list_turns(session.id) == []
        assert db.list_checkpoints(session.id) == []
        with pytest.raises(CheckpointNotFound):
            db.get_checkpoint(session.id, checkpoint.id)
        with pytest.raises(NotFound):
            db.get_turn(session.id, 1)

    def test_delete_session_is_idempotent(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        db.delete_session(session.id)
        db.delete_session(session.id)
        db.delete_session("ses-never")
        assert db.list_sessions() == []

    def test_delete_session_leaves_other_sessions_and_their_records_alone(
        self, db: Db
    ) -> None:
        doomed = db.create_session(make_session("doomed"))
        kept = db.create_session(make_session("kept", minute=1))
        for session in (doomed, kept):
            db.add_turn(make_turn(session.id, 1))
            db.record_checkpoint(make_checkpoint(session.id, 1), keep=5)
        turns, checkpoints = db.list_turns(kept.id), db.list_checkpoints(kept.id)
        db.delete_session(doomed.id)
        assert db.list_sessions() == [kept]
        assert db.list_turns(kept.id) == turns
        assert db.list_checkpoints(kept.id) == checkpoints

    def test_every_session_field_survives_storage(self, db: Db) -> None:
        session = Session(
            id="ses-0badc0de",
            name="full",
            title="A title with ünïcode and \"quotes\"",
            owner="tok-1",
            environment="env-x",
            harness="codex",
            model="gpt-x",
            repo="https://example.com/r.git",
            base_branch="main",
            branch="custom/branch",
            base_commit="0" * 40,
            harness_session="thread-1",
            sandbox_id="sbx-1",
            state=SessionState.SUSPENDED,
            idle_minutes=12.5,
            job_id="job-1",
            created_at=at(1),
            last_active_at=at(2.000001),
            updated_at=at(3),
        )
        db.create_session(session)
        stored = db.get_session(session.id)
        assert stored == session.model_copy(update={"version": 1})
        assert stored.model_dump() == {**session.model_dump(), "version": 1}
        assert stored.created_at.utcoffset() == timedelta(0)
        assert db.find_session("full") == stored
        assert db.list_sessions() == [stored]

    def test_a_session_detail_is_stored_as_its_session(self, db: Db) -> None:
        session = make_session("alpha")
        detail = SessionDetail(
            **session.model_dump(), turns=[make_turn(session.id, 1)], checkpoints=[]
        )
        created = db.create_session(detail)
        assert db.get_session(session.id) == created
        assert created.model_dump() == {**session.model_dump(), "version": 1}

    def test_two_threads_updating_one_session_at_once_exactly_one_wins(self, db: Db) -> None:
        created = db.create_session(make_session("race"))
        barrier = threading.Barrier(2, timeout=_THREAD_TIMEOUT)

        def attempt(title: str) -> Session | None:
            mine = db.get_session(created.id)
            barrier.wait()
            try:
                return db.update_session(mine.model_copy(update={"title": title}))
            except VersionConflict:
                return None

        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(attempt, title) for title in ("left", "right")]
            results = [future.result(timeout=_THREAD_TIMEOUT) for future in futures]
        winners = [result for result in results if result is not None]
        assert len(winners) == 1
        assert winners[0].version == 2
        assert db.get_session(created.id) == winners[0]

    # ------------------------------------------------------------------ turns

    def test_add_turn_returns_it_at_version_1_and_get_turn_finds_it(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        turn = make_turn(session.id, 1)
        added = db.add_turn(turn)
        assert added.version == 1
        assert turn.version == 0
        assert db.get_turn(session.id, 1) == added

    def test_get_of_a_missing_turn_raises_not_found(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        db.add_turn(make_turn(session.id, 1))
        with pytest.raises(NotFound):
            db.get_turn(session.id, 2)
        with pytest.raises(NotFound):
            db.get_turn("ses-other", 1)

    def test_add_turn_with_a_taken_number_raises_already_exists_and_keeps_the_first(
        self, db: Db
    ) -> None:
        session = db.create_session(make_session("alpha"))
        first = db.add_turn(make_turn(session.id, 1, message="first"))
        with pytest.raises(AlreadyExists):
            db.add_turn(make_turn(session.id, 1, message="second"))
        assert db.list_turns(session.id) == [first]

    def test_the_same_turn_number_in_another_session_is_fine(self, db: Db) -> None:
        a = db.create_session(make_session("a"))
        b = db.create_session(make_session("b", minute=1))
        db.add_turn(make_turn(a.id, 1))
        added = db.add_turn(make_turn(b.id, 1))
        assert db.list_turns(b.id) == [added]

    def test_list_turns_is_oldest_first_by_number(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        for n in (3, 1, 2):
            db.add_turn(make_turn(session.id, n))
        assert [turn.n for turn in db.list_turns(session.id)] == [1, 2, 3]

    def test_list_turns_of_a_session_without_turns_is_empty(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        assert db.list_turns(session.id) == []

    def test_update_turn_is_a_compare_and_set(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        added = db.add_turn(make_turn(session.id, 1))
        finished = added.model_copy(
            update={"outcome": TurnOutcome.EXITED, "finished_at": at(5), "log_cursor": 10}
        )
        updated = db.update_turn(finished)
        assert updated.version == 2
        assert finished.version == 1
        assert db.get_turn(session.id, 1) == updated
        with pytest.raises(VersionConflict):
            db.update_turn(added.model_copy(update={"summary": "stale"}))
        assert db.get_turn(session.id, 1) == updated

    def test_update_of_a_missing_turn_raises_not_found(self, db: Db) -> None:
        session = db.create_session(make_session("alpha"))
        with pytest.raises(NotFound):
            db.update_turn(make_turn(session.id, 1).model_copy(update={"version": 1}))
        assert db.list_turns(session.id) == []

    def test_every_turn_field_survives_storage(self, db: Db) -> None:
        turn = Turn(
            session_id="ses-1",
            n=7,
            message="multi\nline message with ünïcode",
            run_id="run-abc",
            started_at=at(1),
            finished_at=at(1.5),
            exit_code=-9,
            outcome=TurnOutcome.TIMED_OUT,
            summary="did things",
            harness_session="thread-9",
            usage={"input_tokens": 123, "output_tokens": 45},
            log_cursor=4096,
        )
        db.add_turn(turn)
        stored = db.get_turn("ses-1", 7)
        assert stored == turn.model_copy(update={"version": 1})
        assert stored.model_dump() == {**turn.model_dump(), "version": 1}
        assert db.list_turns("ses-1") == [stored]

    # ------------------------------------------------------------------ checkpoints

    def test_record_checkpoint_stores_it_at_version_1_and_drops_nothing_under_keep(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-other")
        checkpoint = make_checkpoint("ses-1", 1)
        assert db.record_checkpoint(checkpoint, keep=2) == []
        stored = db.get_checkpoint("ses-1", checkpoint.id)
        assert stored.version == 1
        assert checkpoint.version == 0
        assert stored == checkpoint.model_copy(update={"version": 1})
        assert db.record_checkpoint(make_checkpoint("ses-1", 2), keep=2) == []
        assert len(db.list_checkpoints("ses-1")) == 2

    def test_record_checkpoint_prunes_to_keep_and_returns_exactly_the_oldest_dropped(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-other")
        recorded = [make_checkpoint("ses-1", minute) for minute in (1, 2, 3, 4, 5)]
        for checkpoint in recorded[:4]:
            db.record_checkpoint(checkpoint, keep=5)
        dropped = db.record_checkpoint(recorded[4], keep=2)
        assert _ids(dropped) == _ids(recorded[:3])
        assert all(checkpoint.version == 1 for checkpoint in dropped)
        assert _ids(db.list_checkpoints("ses-1")) == _ids(recorded[3:])
        for gone in recorded[:3]:
            with pytest.raises(CheckpointNotFound):
                db.get_checkpoint("ses-1", gone.id)
        newest = make_checkpoint("ses-1", 6)
        assert _ids(db.record_checkpoint(newest, keep=2)) == [recorded[3].id]
        assert _ids(db.list_checkpoints("ses-1")) == [recorded[4].id, newest.id]

    def test_record_checkpoint_prunes_by_ts_not_by_insertion_order(self, db: Db) -> None:
        _sessions(db, "ses-1", "ses-other")
        late = make_checkpoint("ses-1", 10)
        early = make_checkpoint("ses-1", 1)
        middle = make_checkpoint("ses-1", 5)
        db.record_checkpoint(late, keep=2)
        db.record_checkpoint(early, keep=2)
        assert _ids(db.record_checkpoint(middle, keep=2)) == [early.id]
        assert _ids(db.list_checkpoints("ses-1")) == [middle.id, late.id]

    def test_pruning_never_drops_the_checkpoint_last_restored_nor_the_newest_checked_one(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1")
        restored = make_checkpoint("ses-1", 1, verified=True)
        db.record_checkpoint(restored, keep=5)
        session = db.get_session("ses-1")
        db.update_session(session.model_copy(update={"restored_from": restored.id}))
        unchecked = [make_checkpoint("ses-1", minute) for minute in (2, 3, 4, 5)]
        for checkpoint in unchecked:
            db.record_checkpoint(checkpoint, keep=2)
        # The agent broke the three newest: the one restored from is spared, whatever keep says.
        assert _ids(db.list_checkpoints("ses-1")) == [restored.id] + _ids(unchecked[-2:])
        checked = make_checkpoint("ses-1", 6, verified=True)
        assert _ids(db.record_checkpoint(checked, keep=1)) == _ids(unchecked[-2:])
        assert _ids(db.list_checkpoints("ses-1")) == [restored.id, checked.id]

    def test_record_checkpoint_with_a_taken_id_raises_already_exists_and_prunes_nothing(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-other")
        first = make_checkpoint("ses-1", 1)
        second = make_checkpoint("ses-1", 2)
        db.record_checkpoint(first, keep=5)
        db.record_checkpoint(second, keep=5)
        with pytest.raises(AlreadyExists):
            db.record_checkpoint(make_checkpoint("ses-1", 3, id=second.id), keep=1)
        assert _ids(db.list_checkpoints("ses-1")) == [first.id, second.id]
        assert db.get_checkpoint("ses-1", second.id).ts == second.ts

    def test_record_checkpoint_for_a_missing_session_raises_session_not_found_and_stores_nothing(
        self, db: Db
    ) -> None:
        with pytest.raises(SessionNotFound):
            db.record_checkpoint(make_checkpoint("ses-gone", 1), keep=5)
        assert db.list_checkpoints("ses-gone") == []

    @pytest.mark.parametrize("how", ["being archived", "archived"])
    def test_a_checkpoint_of_an_archived_session_is_refused_and_nothing_changes(
        self, db: Db, how: str
    ) -> None:
        _sessions(db, "ses-1")
        kept = make_checkpoint("ses-1", 1)
        db.record_checkpoint(kept, keep=1)
        session = db.get_session("ses-1")
        claim = Claim(kind=ClaimKind.ARCHIVE, by="w", token="t", until=session.updated_at)
        change = {"claim": claim} if how == "being archived" else {"state": SessionState.ARCHIVED}
        db.update_session(session.model_copy(update=change))
        with pytest.raises(InvalidState):
            db.record_checkpoint(make_checkpoint("ses-1", 2), keep=1)
        assert _ids(db.list_checkpoints("ses-1")) == [kept.id]

    def test_pruning_leaves_other_sessions_checkpoints_alone(self, db: Db) -> None:
        _sessions(db, "ses-1", "ses-other")
        others = [make_checkpoint("ses-other", minute) for minute in (0, 1, 2)]
        for checkpoint in others:
            db.record_checkpoint(checkpoint, keep=5)
        for minute in (3, 4, 5):
            db.record_checkpoint(make_checkpoint("ses-1", minute), keep=1)
        assert len(db.list_checkpoints("ses-1")) == 1
        assert _ids(db.list_checkpoints("ses-other")) == _ids(others)

    def test_list_checkpoints_is_oldest_first_by_ts(self, db: Db) -> None:
        _sessions(db, "ses-1", "ses-other")
        recorded = [make_checkpoint("ses-1", minute) for minute in (3, 1, 2)]
        for checkpoint in recorded:
            db.record_checkpoint(checkpoint, keep=5)
        listed = db.list_checkpoints("ses-1")
        assert [checkpoint.ts for checkpoint in listed] == [at(1), at(2), at(3)]
        assert db.list_checkpoints("ses-none") == []

    def test_get_checkpoint_of_a_missing_id_or_another_session_raises_checkpoint_not_found(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-other")
        checkpoint = make_checkpoint("ses-1", 1)
        db.record_checkpoint(checkpoint, keep=5)
        with pytest.raises(CheckpointNotFound):
            db.get_checkpoint("ses-1", "ckp-000000000000")
        with pytest.raises(CheckpointNotFound):
            db.get_checkpoint("ses-2", checkpoint.id)

    def test_delete_checkpoints_returns_what_was_dropped_and_leaves_other_sessions(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-2")
        mine = [make_checkpoint("ses-1", minute) for minute in (2, 1)]
        other = make_checkpoint("ses-2", 1)
        for checkpoint in (*mine, other):
            db.record_checkpoint(checkpoint, keep=5)
        dropped = db.delete_checkpoints("ses-1")
        assert sorted(_ids(dropped)) == sorted(_ids(mine))
        assert all(checkpoint.version == 1 for checkpoint in dropped)
        assert db.list_checkpoints("ses-1") == []
        assert _ids(db.list_checkpoints("ses-2")) == [other.id]
        assert db.delete_checkpoints("ses-1") == []

    def test_every_checkpoint_field_with_parts_and_warnings_survives_storage(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1", "ses-other")
        checkpoint = Checkpoint(
            id="ckp-0123456789ab",
            session_id="ses-1",
            ts=at(1.25),
            reason=CheckpointReason.SUSPEND,
            head="a" * 40,
            base="b" * 40,
            branch="hangar/session/full",
            harness="pi",
            harness_session="sess-1",
            cwd="/workspace/repo",
            parts=[
                CheckpointPart(
                    name="repo.bundle",
                    size=1000,
                    stored_size=1044,
                    compression=Compression.NONE,
                    sha256="c" * 64,
                ),
                CheckpointPart(
                    name="untracked.tar.zst",
                    size=2 * 1024**3,
                    stored_size=2 * 1024**3 + 44,
                    compression=Compression.ZSTD,
                    sha256="d" * 64,
                ),
            ],
            warnings=["skipped big.bin (over 100 MB)", "ünïcode warning"],
            fingerprint="fp-1",
            wrapped_key="d3JhcHBlZA==",
        )
        db.record_checkpoint(checkpoint, keep=5)
        stored = db.get_checkpoint("ses-1", checkpoint.id)
        assert stored == checkpoint.model_copy(update={"version": 1})
        assert stored.model_dump() == {**checkpoint.model_dump(), "version": 1}
        assert db.list_checkpoints("ses-1") == [stored]

    # ------------------------------------------------------------------ environments

    def test_create_environment_returns_it_at_version_1_and_get_finds_it(self, db: Db) -> None:
        env = Environment(
            name="web",
            repo="https://example.com/web.git",
            branch="main",
            setup="make deps",
            vars={"A": "1", "B": "two words"},
            secrets={"TOKEN": "Y2lwaGVy"},
            created_at=at(0),
            updated_at=at(1),
        )
        created = db.create_environment(env)
        assert created.version == 1
        assert env.version == 0
        assert created == env.model_copy(update={"version": 1})
        assert db.get_environment("web") == created

    def test_create_environment_with_a_taken_name_raises_already_exists(self, db: Db) -> None:
        first = db.create_environment(Environment(name="web", repo="/src/one"))
        with pytest.raises(AlreadyExists):
            db.create_environment(Environment(name="web", repo="/src/two"))
        assert db.get_environment("web") == first

    def test_get_of_a_missing_environment_raises_environment_not_found(self, db: Db) -> None:
        with pytest.raises(EnvironmentNotFound):
            db.get_environment("nope")

    def test_list_environments_is_sorted_by_name(self, db: Db) -> None:
        for name in ("mid", "zed", "abc"):
            db.create_environment(Environment(name=name, repo="/src"))
        assert [env.name for env in db.list_environments()] == ["abc", "mid", "zed"]

    def test_update_environment_is_a_compare_and_set(self, db: Db) -> None:
        created = db.create_environment(Environment(name="web", repo="/src"))
        changed = created.model_copy(update={"vars": {"K": "V"}})
        updated = db.update_environment(changed)
        assert updated.version == 2
        assert changed.version == 1
        assert db.get_environment("web") == updated
        with pytest.raises(VersionConflict):
            db.update_environment(created.model_copy(update={"setup": "stale"}))
        assert db.get_environment("web") == updated

    def test_update_of_a_missing_environment_raises_environment_not_found(
        self, db: Db
    ) -> None:
        with pytest.raises(EnvironmentNotFound):
            db.update_environment(Environment(name="ghost", repo="/src", version=1))

    def test_delete_environment_removes_it_and_is_idempotent(self, db: Db) -> None:
        db.create_environment(Environment(name="web", repo="/src"))
        kept = db.create_environment(Environment(name="api", repo="/src"))
        db.delete_environment("web")
        db.delete_environment("web")
        with pytest.raises(EnvironmentNotFound):
            db.get_environment("web")
        assert db.list_environments() == [kept]

    # ------------------------------------------------------------------ tokens

    def test_create_token_returns_it_at_version_1_and_find_token_finds_it_by_hash(
        self, db: Db
    ) -> None:
        token = make_token("h" * 64, scopes=["admin"], label="ci")
        created = db.create_token(token)
        assert created.version == 1
        assert token.version == 0
        assert created == token.model_copy(update={"version": 1})
        assert db.find_token("h" * 64) == created

    def test_find_token_of_an_unknown_hash_raises_token_not_found(self, db: Db) -> None:
        db.create_token(make_token("h" * 64))
        with pytest.raises(TokenNotFound):
            db.find_token("x" * 64)

    def test_create_token_with_a_taken_id_raises_already_exists(self, db: Db) -> None:
        first = db.create_token(make_token("a" * 64))
        with pytest.raises(AlreadyExists):
            db.create_token(make_token("b" * 64, id=first.id))
        assert db.list_tokens() == [first]

    def test_list_tokens_is_oldest_first(self, db: Db) -> None:
        tokens = [make_token(f"{i}" * 64, minute=minute) for i, minute in enumerate((2, 0, 1))]
        for token in tokens:
            db.create_token(token)
        assert _ids(db.list_tokens()) == [tokens[1].id, tokens[2].id, tokens[0].id]

    def test_delete_token_removes_it_and_is_idempotent(self, db: Db) -> None:
        doomed = db.create_token(make_token("a" * 64))
        kept = db.create_token(make_token("b" * 64, minute=1))
        db.delete_token(doomed.id)
        db.delete_token(doomed.id)
        with pytest.raises(TokenNotFound):
            db.find_token("a" * 64)
        assert db.list_tokens() == [kept]

    def test_take_token_returns_it_once_and_then_raises_token_not_found(self, db: Db) -> None:
        ticket = db.create_token(make_token("a" * 64, scopes=["terminal:ses-1"],
                                            expires_at=at(1)))  # fmt: skip
        kept = db.create_token(make_token("b" * 64, minute=1))
        assert db.take_token("a" * 64) == ticket
        with pytest.raises(TokenNotFound):
            db.take_token("a" * 64)
        with pytest.raises(TokenNotFound):
            db.find_token("a" * 64)
        assert db.list_tokens() == [kept]
        with pytest.raises(TokenNotFound):
            db.take_token("x" * 64)

    def test_a_taken_tokens_secret_can_be_used_again(self, db: Db) -> None:
        db.create_token(make_token("a" * 64))
        db.take_token("a" * 64)
        again = db.create_token(make_token("a" * 64))
        assert db.find_token("a" * 64) == again

    def test_several_threads_taking_one_token_at_once_exactly_one_gets_it(self, db: Db) -> None:
        ticket = db.create_token(make_token("a" * 64, scopes=["terminal:ses-1"]))
        takers = 4
        barrier = threading.Barrier(takers, timeout=_THREAD_TIMEOUT)

        def attempt(_: int) -> Token | None:
            barrier.wait()
            try:
                return db.take_token("a" * 64)
            except TokenNotFound:
                return None

        with ThreadPoolExecutor(max_workers=takers) as pool:
            futures = [pool.submit(attempt, n) for n in range(takers)]
            results = [future.result(timeout=_THREAD_TIMEOUT) for future in futures]
        assert [r for r in results if r is not None] == [ticket]
        assert db.list_tokens() == []

    # ------------------------------------------------------------------ tick due-times

    def test_set_due_creates_a_due_time_at_version_1(self, db: Db) -> None:
        due = make_due("idle:ses-1", 5, payload={"session_id": "ses-1", "n": 2})
        stored = db.set_due(due)
        assert stored.version == 1
        assert due.version == 0
        assert stored == due.model_copy(update={"version": 1})
        assert db.list_due(at(5)) == [stored]

    def test_set_due_again_moves_it_and_bumps_the_version(self, db: Db) -> None:
        first = db.set_due(make_due("idle:ses-1", 5))
        moved = db.set_due(make_due("idle:ses-1", 9))
        assert moved.version == first.version + 1
        assert db.list_due(at(8)) == []
        assert db.list_due(at(9)) == [moved]
        again = db.set_due(moved.model_copy(update={"due_at": at(7)}))
        assert again.version == 3
        assert db.list_due(at(100)) == [again]

    def test_get_due_returns_the_stored_due_time_or_none(self, db: Db) -> None:
        assert db.get_due("idle:ses-1") is None
        stored = db.set_due(make_due("idle:ses-1", 5, payload={"session": "ses-1"}))
        assert db.get_due("idle:ses-1") == stored
        moved = db.set_due(make_due("idle:ses-1", 7))
        assert db.get_due("idle:ses-1") == moved
        db.clear_due("idle:ses-1")
        assert db.get_due("idle:ses-1") is None

    def test_list_due_returns_those_at_or_before_the_time_earliest_first(self, db: Db) -> None:
        late = db.set_due(make_due("c", 3))
        early = db.set_due(make_due("a", 1))
        middle = db.set_due(make_due("b", 2))
        db.set_due(make_due("d", 4))
        assert db.list_due(at(3)) == [early, middle, late]
        assert db.list_due(at(0.5)) == []
        assert db.list_due(at(3), limit=2) == [early, middle]

    def test_list_due_compares_instants_to_the_microsecond(self, db: Db) -> None:
        due = db.set_due(make_due("a", 1))
        assert db.list_due(at(1) - timedelta(microseconds=1)) == []
        assert db.list_due(at(1)) == [due]

    def test_clear_due_with_a_stale_version_does_nothing_and_returns_false(
        self, db: Db
    ) -> None:
        first = db.set_due(make_due("idle:ses-1", 5))
        moved = db.set_due(make_due("idle:ses-1", 6))
        assert db.clear_due("idle:ses-1", version=first.version) is False
        assert db.list_due(at(10)) == [moved]

    def test_clear_due_with_the_current_version_removes_it_and_returns_true(
        self, db: Db
    ) -> None:
        due = db.set_due(make_due("idle:ses-1", 5))
        other = db.set_due(make_due("idle:ses-2", 5))
        assert db.clear_due("idle:ses-1", version=due.version) is True
        assert db.list_due(at(10)) == [other]

    def test_clear_due_without_a_version_removes_it_and_returns_true(self, db: Db) -> None:
        db.set_due(make_due("idle:ses-1", 5))
        db.set_due(make_due("idle:ses-1", 6))
        assert db.clear_due("idle:ses-1") is True
        assert db.list_due(at(10)) == []

    def test_clear_due_of_a_missing_key_returns_false(self, db: Db) -> None:
        assert db.clear_due("nothing") is False
        assert db.clear_due("nothing", version=1) is False

    def test_clear_due_with_the_version_and_due_at_read_spares_one_cleared_and_set_again(
        self, db: Db
    ) -> None:
        handled = db.set_due(make_due("idle:ses-1", 5))
        db.clear_due("idle:ses-1")
        again = db.set_due(make_due("idle:ses-1", 9))
        assert again.version == handled.version
        assert db.clear_due("idle:ses-1", version=handled.version, due_at=handled.due_at) is False
        assert db.list_due(at(10)) == [again]

    def test_clear_due_with_the_current_version_and_due_at_removes_it(self, db: Db) -> None:
        due = db.set_due(make_due("idle:ses-1", 5))
        assert db.clear_due("idle:ses-1", version=due.version, due_at=due.due_at) is True
        assert db.list_due(at(10)) == []

    def test_clear_due_with_a_due_at_off_by_a_microsecond_does_nothing(self, db: Db) -> None:
        due = db.set_due(make_due("idle:ses-1", 5))
        later = due.due_at + timedelta(microseconds=1)
        assert db.clear_due("idle:ses-1", due_at=later) is False
        assert db.clear_due("idle:ses-1", version=due.version, due_at=later) is False
        assert db.list_due(at(10)) == [due]
        assert db.clear_due("idle:ses-1", due_at=due.due_at) is True

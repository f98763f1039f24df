"""The SQLite backend: the db conformance suite on a file and in memory, plus what only SQLite
has (a file that outlives the process, URLs, schema versions, writers in other processes)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.db import Db, open_db
from hangar.db.sqlite import SCHEMA_VERSION, SqliteDb
from hangar.errors import AlreadyExists, BackendError, InvalidInput, InvalidSettings
from hangar.models import Environment
from hangar.testing.db import DbConformance, at, make_checkpoint, make_session, make_token
from hangar.testing.db_reuse import CheckpointReuseConformance

_PROCESS_TIMEOUT = 60.0


class TestSqliteFileDb(DbConformance):
    @pytest.fixture
    def db(self, tmp_path: Path) -> Iterator[Db]:
        opened = SqliteDb(tmp_path / "hangar.db")
        yield opened
        opened.close()


class TestSqliteMemoryDb(DbConformance):
    @pytest.fixture
    def db(self) -> Iterator[Db]:
        opened = SqliteDb.from_url("sqlite:///:memory:")
        yield opened
        opened.close()


class TestSqliteCheckpointReuse(CheckpointReuseConformance):
    @pytest.fixture
    def db(self, tmp_path: Path) -> Iterator[Db]:
        opened = SqliteDb(tmp_path / "hangar.db")
        yield opened
        opened.close()


def test_data_survives_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    first = SqliteDb(path)
    session = first.create_session(make_session("alpha"))
    checkpoint = make_checkpoint(session.id, 1)
    first.record_checkpoint(checkpoint, keep=5)
    env = first.create_environment(Environment(name="web", repo="/src"))
    first.close()

    second = SqliteDb(path)
    try:
        assert second.get_session(session.id) == session
        assert second.list_checkpoints(session.id) == [checkpoint.model_copy(update={"version": 1})]
        assert second.get_environment("web") == env
    finally:
        second.close()


def test_open_db_with_a_sqlite_url_returns_a_sqlite_db(tmp_path: Path) -> None:
    settings = Settings.build(data_dir=tmp_path)
    opened = open_db(f"sqlite://{tmp_path}/state/hangar.db", settings)
    try:
        assert isinstance(opened, SqliteDb)
        assert (tmp_path / "state" / "hangar.db").is_file()
    finally:
        opened.close()


def test_open_db_with_the_default_settings_url_opens_the_file_in_the_data_dir(
    tmp_path: Path,
) -> None:
    settings = Settings.build(data_dir=tmp_path / "data")
    opened = open_db(settings.db, settings)
    try:
        opened.create_session(make_session("alpha"))
        assert (tmp_path / "data" / "hangar.db").is_file()
    finally:
        opened.close()


def test_open_db_with_an_unknown_scheme_raises_invalid_settings(tmp_path: Path) -> None:
    settings = Settings.build(data_dir=tmp_path)
    with pytest.raises(InvalidSettings):
        open_db(f"postgres://{tmp_path}/hangar.db", settings)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/hangar.db",
        "sqlite:hangar.db",
        "sqlite://",
        "sqlite:///tmp/dir/",
        "mysql:///x",
    ],
)
def test_from_url_refuses_anything_but_an_absolute_file_path(url: str) -> None:
    with pytest.raises(InvalidSettings):
        SqliteDb.from_url(url)


def test_from_url_makes_the_parent_folders(tmp_path: Path) -> None:
    opened = SqliteDb.from_url(f"sqlite://{tmp_path}/a/b/hangar.db")
    opened.close()
    assert (tmp_path / "a" / "b" / "hangar.db").is_file()


def test_opening_sets_wal_mode_and_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    SqliteDb(path).close()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        raw.close()


def test_a_version_1_file_gains_the_activity_order_from_its_records(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    raw = sqlite3.connect(path)  # the sessions table as version 1 made it
    raw.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
                " state TEXT NOT NULL, created_at INTEGER NOT NULL, version INTEGER NOT NULL,"
                " doc TEXT NOT NULL)")  # fmt: skip
    made = [make_session(f"s{i}", i, last_active_at=at(10 - i), version=1) for i in range(3)]
    with raw:
        for s in made:
            raw.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, 1, ?)",
                        (s.id, s.name, s.state.value, 0, s.model_dump_json()))  # fmt: skip
        raw.execute("PRAGMA user_version = 1")
    raw.close()
    db = SqliteDb(path)
    try:
        assert [s.name for s in db.page_sessions(10, order="activity")] == ["s0", "s1", "s2"]
    finally:
        db.close()


def test_a_file_with_a_newer_schema_is_refused_with_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    SqliteDb(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(BackendError, match="schema version"):
        SqliteDb(path)


def test_a_file_that_is_not_a_database_raises_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    path.write_bytes(b"this is not a database, just some text that is long enough" * 100)
    with pytest.raises(BackendError):
        SqliteDb(path)


def test_a_stored_record_that_does_not_parse_raises_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    db = SqliteDb(path)
    try:
        session = db.create_session(make_session("alpha"))
        raw = sqlite3.connect(path)
        with raw:
            raw.execute("UPDATE sessions SET doc = '{\"nonsense\": 1}'")
        raw.close()
        with pytest.raises(BackendError):
            db.get_session(session.id)
    finally:
        db.close()


def test_calls_after_close_raise_backend_error_and_close_is_idempotent(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "hangar.db")
    db.close()
    db.close()
    with pytest.raises(BackendError):
        db.list_sessions()
    memory = SqliteDb.from_url("sqlite:///:memory:")
    memory.close()
    with pytest.raises(BackendError):
        memory.list_sessions()


def test_record_checkpoint_with_keep_below_1_raises_invalid_input_and_records_nothing(
    tmp_path: Path,
) -> None:
    db = SqliteDb(tmp_path / "hangar.db")
    try:
        with pytest.raises(InvalidInput):
            db.record_checkpoint(make_checkpoint("ses-1", 1), keep=0)
        assert db.list_checkpoints("ses-1") == []
    finally:
        db.close()


def test_a_token_whose_secret_hash_is_taken_raises_already_exists(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "hangar.db")
    try:
        first = db.create_token(make_token("a" * 64))
        with pytest.raises(AlreadyExists):
            db.create_token(make_token("a" * 64, minute=1))
        assert db.list_tokens() == [first]
    finally:
        db.close()


def test_calls_from_many_short_lived_threads_share_a_bounded_pool(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "hangar.db")
    try:
        session = db.create_session(make_session("alpha"))
        errors: list[BaseException] = []

        def read() -> None:
            try:
                assert db.get_session(session.id) == session
            except BaseException as exc:  # handed to the main thread, which fails the test
                errors.append(exc)

        for _ in range(50):
            thread = threading.Thread(target=read)
            thread.start()
            thread.join(timeout=_PROCESS_TIMEOUT)
        assert errors == []
        assert db.get_session(session.id) == session
    finally:
        db.close()


_RACER = """
import sys
from hangar.db.sqlite import SqliteDb
from hangar.errors import VersionConflict

db = SqliteDb(sys.argv[1])
mine = db.get_session(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
try:
    db.update_session(mine.model_copy(update={"title": sys.argv[3]}))
    print("won", flush=True)
except VersionConflict:
    print("lost", flush=True)
finally:
    db.close()
"""


def test_writers_in_separate_processes_get_exactly_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "hangar.db"
    db = SqliteDb(path)
    try:
        session = db.create_session(make_session("race"))
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", _RACER, str(path), session.id, f"title-{i}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        try:
            # Every racer has read version 1 before any of them writes.
            for racer in racers:
                assert racer.stdout is not None
                assert racer.stdout.readline() == "ready\n"
            outcomes = [racer.communicate("go\n", timeout=_PROCESS_TIMEOUT)[0] for racer in racers]
        finally:
            for racer in racers:
                if racer.poll() is None:
                    racer.kill()
                    racer.wait(timeout=_PROCESS_TIMEOUT)
        assert [racer.returncode for racer in racers] == [0, 0, 0]
        assert sorted(outcomes) == ["lost\n", "lost\n", "won\n"]
        winner = outcomes.index("won\n")
        stored = db.get_session(session.id)
        assert stored.version == 2
        assert stored.title == f"title-{winner}"
    finally:
        db.close()

"""The Firestore db backend on Google's Firestore emulator: the db conformance suite, each test
under its own prefix, plus what only Firestore has (URLs, the layout Terraform's indexes rely
on, document IDs, contention, the 1 MiB limit, vendor errors)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import hangar.db.firestore as firestore_module
from hangar.config import Settings
from hangar.db import Db, open_db
from hangar.db.firestore import MAX_RECORD_BYTES, FirestoreDb
from hangar.db.migrations import migrate
from hangar.db.sqlite import SqliteDb
from hangar.errors import (
    AlreadyExists,
    BackendError,
    InvalidInput,
    InvalidSettings,
    NotFound,
    SessionNotFound,
    TokenNotFound,
    VersionConflict,
)
from hangar.models import Session
from hangar.testing.db import (
    DbConformance,
    at,
    make_checkpoint,
    make_due,
    make_session,
    make_token,
    make_turn,
)
from hangar.testing.db_reuse import CheckpointReuseConformance

from emulators.cloud import CloudEmulators
from emulators.firestore import FirestoreEmulator

PROJECT = "hangar-test"
_THREAD_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def firestore_emulator(cloud_emulators: CloudEmulators) -> Iterator[FirestoreEmulator]:
    """The run's Firestore emulator (tests/conftest.py); FIRESTORE_EMULATOR_HOST points at it
    meanwhile. Tests keep apart by their own prefix or project."""
    emulator = cloud_emulators.firestore
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ.update(emulator.environment())
    try:
        yield emulator
    finally:
        if previous is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def prefix(firestore_emulator: FirestoreEmulator) -> str:
    """A namespace of this test's own on the shared emulator."""
    return _prefix()


@pytest.fixture
def fdb(prefix: str) -> Iterator[FirestoreDb]:
    opened = FirestoreDb.from_url(f"firestore://{PROJECT}/(default)/{prefix}")
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def raw(firestore_emulator: FirestoreEmulator) -> Iterator[Any]:
    """The official client on the emulator, to look at what the backend stored."""
    from google.cloud import firestore

    client = firestore.Client(project=PROJECT)
    yield client
    client.close()


class TestFirestoreDb(DbConformance):
    @pytest.fixture
    def db(self, fdb: FirestoreDb) -> Db:
        return fdb


class TestFirestoreCheckpointReuse(CheckpointReuseConformance):
    @pytest.fixture
    def db(self, fdb: FirestoreDb) -> Db:
        return fdb


# ---------------------------------------------------------------------- URLs and building


@pytest.mark.parametrize(
    ("url", "project", "database", "space"),
    [
        ("firestore://my-project/(default)", "my-project", "(default)", ""),
        ("firestore://my-project/hangar-db", "my-project", "hangar-db", ""),
        ("firestore://my-project/(default)/t-1_a.b", "my-project", "(default)", "t-1_a.b"),
    ],
)
def test_from_url_reads_the_project_the_database_and_the_prefix(
    url: str, project: str, database: str, space: str
) -> None:
    db = FirestoreDb.from_url(url)
    assert (db.project, db.database, db.prefix) == (project, database, space)


@pytest.mark.parametrize(
    "url",
    [
        "firestore://",
        "firestore://my-project",
        "firestore://my-project/",
        "firestore:///(default)",
        "firestore://My_Project/(default)",
        "firestore://my-project/Bad_DB",
        "firestore://my-project/(default)/",
        "firestore://my-project/(default)/a/b",
        "firestore://my-project/(default)/__x__",
        "firestore://my-project/(default)/..",
        "firestore://my-project/(default)?x=1",
        "firestore:my-project/(default)",
        "sqlite://my-project/(default)",
    ],
)
def test_from_url_refuses_anything_else_with_invalid_settings_naming_hangar_db(url: str) -> None:
    with pytest.raises(InvalidSettings) as caught:
        FirestoreDb.from_url(url)
    assert caught.value.data["setting"] == "HANGAR_DB"
    assert "HANGAR_DB" in caught.value.message


def test_open_db_with_a_firestore_url_returns_a_firestore_db(tmp_path: Path) -> None:
    opened = open_db("firestore://my-project/(default)/p", Settings.build(data_dir=tmp_path))
    assert isinstance(opened, FirestoreDb)
    assert opened.prefix == "p"


def test_importing_and_building_the_backend_loads_no_google_client_and_contacts_nothing(
    tmp_path: Path,
) -> None:
    # A fresh interpreter, pointed at a port where nothing listens: building must not notice.
    script = (
        "import sys\n"
        "from hangar.config import Settings\n"
        "from hangar.db import open_db\n"
        "db = open_db('firestore://my-project/(default)/p', Settings.build(data_dir=sys.argv[1]))\n"
        "db.close()\n"
        "heavy = ('google.cloud.firestore', 'google.api_core', 'google.auth', 'grpc')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    env = {**os.environ, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------------- layout


def test_records_live_under_the_prefix_in_the_collections_terraform_indexes(
    fdb: FirestoreDb, prefix: str, raw: Any
) -> None:
    session = fdb.create_session(make_session("alpha"))
    fdb.add_turn(make_turn(session.id, 1))
    checkpoint = make_checkpoint(session.id, 2, format=2, uses=[session.id])
    fdb.record_checkpoint(checkpoint, keep=5)
    fdb.set_due(make_due("idle:" + session.id, 3))
    space = raw.collection("spaces").document(prefix)
    stored = space.collection("sessions").document(session.id).get().to_dict()
    assert stored["state"] == "starting"
    assert stored["created_at"] == session.created_at  # a native timestamp, to the microsecond
    assert isinstance(stored["created_at"], datetime)
    turns = list(space.collection("turns").stream())
    assert [(t.get("session_id"), t.get("n")) for t in turns] == [(session.id, 1)]
    ckp = space.collection("checkpoints").document(checkpoint.id).get()
    assert (ckp.get("session_id"), ckp.get("ts")) == (session.id, checkpoint.ts)
    assert ckp.get("uses") == [session.id]  # a native array: checkpoints_using's array-contains
    tick = space.collection("ticks").document("idle:" + session.id).get()
    assert tick.get("due_at") == at(3)


def test_without_a_prefix_the_collections_are_at_the_root(
    firestore_emulator: FirestoreEmulator,
) -> None:
    from google.cloud import firestore

    project = f"root-{uuid.uuid4().hex[:8]}"
    db = FirestoreDb.from_url(f"firestore://{project}/(default)")
    raw = firestore.Client(project=project)
    try:
        session = db.create_session(make_session("alpha"))
        assert raw.collection("sessions").document(session.id).get().exists
        assert sorted(c.id for c in raw.collections()) == ["session_names", "sessions"]
    finally:
        raw.close()
        db.close()
        firestore_emulator.reset(project)


def test_two_prefixes_do_not_see_each_other(fdb: FirestoreDb) -> None:
    other = FirestoreDb.from_url(f"firestore://{PROJECT}/(default)/{_prefix()}")
    try:
        mine = fdb.create_session(make_session("alpha"))
        theirs = other.create_session(make_session("alpha"))
        assert fdb.list_sessions() == [mine]
        assert other.find_session("alpha") == theirs
        with pytest.raises(SessionNotFound):
            other.get_session(mine.id)
    finally:
        other.close()


@pytest.mark.parametrize("key", ["watch/ses-1/3", "a%2Fb", "%", "", ".", "..", "__x__", "ü é"])
def test_keys_firestore_cannot_take_as_document_ids_still_round_trip(
    fdb: FirestoreDb, key: str
) -> None:
    decoy = fdb.set_due(make_due("a/b" if key == "a%2Fb" else "decoy", 1))
    stored = fdb.set_due(make_due(key, 2))
    assert fdb.get_due(key) == stored
    assert fdb.list_due(at(5)) == [decoy, stored]
    assert fdb.clear_due(key, version=1, due_at=at(2)) is True
    assert fdb.get_due(key) is None
    assert fdb.get_due(decoy.key) == decoy


def test_a_session_id_with_a_slash_round_trips_with_its_turns(fdb: FirestoreDb) -> None:
    session = fdb.create_session(make_session("alpha", id="ses/odd"))
    turn = fdb.add_turn(make_turn(session.id, 1))
    assert fdb.get_session("ses/odd") == session
    assert fdb.list_turns("ses/odd") == [turn]
    fdb.delete_session("ses/odd")
    assert fdb.list_turns("ses/odd") == []
    assert fdb.create_session(make_session("alpha")).name == "alpha"  # the name lock went too


def test_a_token_id_with_a_slash_frees_its_secret_when_deleted(fdb: FirestoreDb) -> None:
    token = fdb.create_token(make_token("h" * 64, id="tok/odd"))
    assert fdb.find_token("h" * 64) == token
    fdb.delete_token("tok/odd")
    with pytest.raises(TokenNotFound):
        fdb.find_token("h" * 64)
    assert fdb.create_token(make_token("h" * 64)).secret_hash == "h" * 64


def test_a_token_whose_secret_is_taken_raises_already_exists_and_stores_nothing(
    fdb: FirestoreDb,
) -> None:
    first = fdb.create_token(make_token("h" * 64))
    with pytest.raises(AlreadyExists):
        fdb.create_token(make_token("h" * 64, minute=1))
    assert fdb.list_tokens() == [first]


# ---------------------------------------------------------------------- transactions


def test_two_concurrent_writers_to_one_session_one_wins_and_the_other_gets_version_conflict(
    fdb: FirestoreDb,
) -> None:
    created = fdb.create_session(make_session("race"))
    barrier = threading.Barrier(2, timeout=_THREAD_TIMEOUT)

    def attempt(title: str) -> Session | VersionConflict:
        mine = fdb.get_session(created.id)
        barrier.wait()
        try:
            return fdb.update_session(mine.model_copy(update={"title": title}))
        except VersionConflict as exc:
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(attempt, title) for title in ("left", "right")]
        results = [future.result(timeout=_THREAD_TIMEOUT) for future in futures]
    winners = [r for r in results if isinstance(r, Session)]
    losers = [r for r in results if isinstance(r, VersionConflict)]
    assert len(winners) == 1 and len(losers) == 1
    assert fdb.get_session(created.id) == winners[0]
    assert winners[0].version == 2


def test_a_transaction_still_aborted_after_its_last_attempt_is_a_version_conflict(
    fdb: FirestoreDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One attempt each, and both read before either commits: the emulator aborts one of them.
    monkeypatch.setattr(firestore_module, "MAX_ATTEMPTS", 1)
    monkeypatch.setattr(firestore_module, "DUE_ROUNDS", 1)
    fdb.set_due(make_due("idle:ses-1", 1))
    barrier = threading.Barrier(2, timeout=_THREAD_TIMEOUT)
    read = FirestoreDb._read

    def read_then_wait(self: FirestoreDb, tx: Any, *refs: Any) -> Any:
        found = read(self, tx, *refs)
        barrier.wait()
        return found

    monkeypatch.setattr(FirestoreDb, "_read", read_then_wait)

    def attempt(minute: int) -> object:
        try:
            return fdb.set_due(make_due("idle:ses-1", minute))
        except VersionConflict as exc:
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(attempt, (2, 3), timeout=_THREAD_TIMEOUT))
    # The emulator's locks may abort one of them or, when each waits on the other, both.
    conflicts = [r for r in results if isinstance(r, VersionConflict)]
    assert conflicts, results
    assert all("re-read and try again" in c.message for c in conflicts)
    winners = [r for r in results if not isinstance(r, VersionConflict)]
    monkeypatch.undo()
    stored = fdb.get_due("idle:ses-1")
    assert stored is not None
    if winners:
        (winner,) = winners
        assert stored == winner
    else:  # nothing was written by either
        assert stored.version == 1


def test_a_contended_due_time_is_set_again_rather_than_failing_the_caller(
    fdb: FirestoreDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, one aborts in its first transaction; its next round (no barrier) goes through.
    monkeypatch.setattr(firestore_module, "MAX_ATTEMPTS", 1)
    fdb.set_due(make_due("idle:ses-1", 1))
    barrier = threading.Barrier(2, timeout=_THREAD_TIMEOUT)
    first = threading.local()
    read = FirestoreDb._read

    def read_then_wait(self: FirestoreDb, tx: Any, *refs: Any) -> Any:
        found = read(self, tx, *refs)
        if not getattr(first, "done", False):
            first.done = True
            barrier.wait()
        return found

    monkeypatch.setattr(FirestoreDb, "_read", read_then_wait)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda m: fdb.set_due(make_due("idle:ses-1", m)), (2, 3),
                                timeout=_THREAD_TIMEOUT))  # fmt: skip
    monkeypatch.undo()
    assert sorted(r.version for r in results) == [2, 3]
    stored = fdb.get_due("idle:ses-1")
    assert stored is not None and stored.version == 3


def test_a_rename_moves_the_name_lock_in_the_same_transaction(
    fdb: FirestoreDb, prefix: str, raw: Any
) -> None:
    alpha = fdb.create_session(make_session("alpha"))
    fdb.update_session(alpha.model_copy(update={"name": "omega"}))
    locks = raw.collection("spaces").document(prefix).collection("session_names")
    assert {snap.id: snap.get("session_id") for snap in locks.stream()} == {"omega": alpha.id}
    fdb.delete_session(alpha.id)
    assert list(locks.stream()) == []


def test_delete_session_removes_turns_and_checkpoints_over_several_batches(
    fdb: FirestoreDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(firestore_module, "_PAGE", 2)
    session = fdb.create_session(make_session("alpha"))
    kept = fdb.create_session(make_session("kept", minute=1))
    for n in range(1, 6):
        fdb.add_turn(make_turn(session.id, n))
        fdb.record_checkpoint(make_checkpoint(session.id, n), keep=10)
    fdb.add_turn(make_turn(kept.id, 1))
    fdb.delete_session(session.id)
    assert fdb.list_turns(session.id) == []
    assert fdb.list_checkpoints(session.id) == []
    assert [t.n for t in fdb.list_turns(kept.id)] == [1]


def test_record_checkpoint_prunes_exactly_as_the_sqlite_twin(fdb: FirestoreDb) -> None:
    twin = SqliteDb(":memory:")
    try:
        results: dict[str, list[list[str]]] = {}
        for name, db in (("firestore", fdb), ("sqlite", twin)):
            db.create_session(make_session("alpha", id="ses-1"))
            steps = [(5, 3), (1, 3), (9, 3), (2, 3), (7, 2), (0, 2)]
            checkpoints = [make_checkpoint("ses-1", m, id=f"ckp-{m}") for m, _ in steps]
            dropped = [
                [c.id for c in db.record_checkpoint(checkpoint, keep)]
                for checkpoint, (_, keep) in zip(checkpoints, steps, strict=True)
            ]
            results[name] = [*dropped, [c.id for c in db.list_checkpoints("ses-1")]]
        assert results["firestore"] == results["sqlite"]
        assert results["firestore"][-2:] == [["ckp-0"], ["ckp-7", "ckp-9"]]
    finally:
        twin.close()


# ---------------------------------------------------------------------- limits and errors


def test_a_record_over_the_document_limit_is_invalid_input_and_stores_nothing(
    fdb: FirestoreDb,
) -> None:
    session = fdb.create_session(make_session("alpha"))
    with pytest.raises(InvalidInput) as caught:
        fdb.add_turn(make_turn(session.id, 1, message="x" * (MAX_RECORD_BYTES + 1)))
    assert caught.value.data["limit"] == MAX_RECORD_BYTES
    assert "Firestore" in caught.value.message
    with pytest.raises(NotFound):
        fdb.get_turn(session.id, 1)
    with pytest.raises(InvalidInput):
        fdb.update_session(session.model_copy(update={"title": "é" * (MAX_RECORD_BYTES // 2)}))
    assert fdb.get_session(session.id) == session


def test_the_largest_record_allowed_fits_in_a_firestore_document(fdb: FirestoreDb) -> None:
    session = fdb.create_session(make_session("alpha"))
    turn = make_turn(session.id, 1, message="")
    room = MAX_RECORD_BYTES - len(turn.model_copy(update={"version": 1}).model_dump_json())
    big = fdb.add_turn(turn.model_copy(update={"message": "x" * room}))
    assert fdb.get_turn(session.id, 1) == big


def test_an_unreachable_server_is_a_backend_error_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{port}")
    db = FirestoreDb("hangar-test", "(default)", "gone", timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(BackendError) as caught:
            db.get_session("ses-1")
        with pytest.raises(BackendError):
            db.list_sessions()
    finally:
        db.close()
    assert time.monotonic() - started < 20
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "firestore://hangar-test/(default)/gone" in caught.value.message


def test_a_stored_record_that_does_not_parse_is_a_backend_error(
    fdb: FirestoreDb, prefix: str, raw: Any
) -> None:
    session = fdb.create_session(make_session("alpha"))
    ref = raw.collection("spaces").document(prefix).collection("sessions").document(session.id)
    ref.update({"doc": "{not json"})
    with pytest.raises(BackendError):
        fdb.get_session(session.id)
    ref.update({"doc": 7})
    with pytest.raises(BackendError):
        fdb.list_sessions()


def test_a_session_stored_before_last_activity_was_indexed_is_listed_by_it_after_migrate(
    fdb: FirestoreDb, prefix: str, raw: Any
) -> None:
    from google.cloud.firestore import DELETE_FIELD

    old = fdb.create_session(make_session("old"))
    ref = raw.collection("spaces").document(prefix).collection("sessions").document(old.id)
    ref.update({"last_active_at": DELETE_FIELD})  # as an older hangar wrote it
    assert fdb.page_sessions(10, order="activity") == []
    assert migrate(fdb) == 1
    assert [s.id for s in fdb.page_sessions(10, order="activity")] == [old.id]
    assert migrate(fdb) == 0


def test_a_closed_db_raises_backend_error(prefix: str) -> None:
    db = FirestoreDb.from_url(f"firestore://{PROJECT}/(default)/{prefix}")
    db.close()
    db.close()
    with pytest.raises(BackendError):
        db.get_session("ses-1")


def test_a_naive_datetime_counts_as_utc(fdb: FirestoreDb) -> None:
    due = fdb.set_due(make_due("k", 1))
    naive = due.due_at.astimezone(UTC).replace(tzinfo=None)
    assert fdb.list_due(naive) == [due]
    assert fdb.clear_due("k", due_at=naive) is True


# ---------------------------------------------------------------------- the emulator


def test_reset_empties_one_project_and_leaves_the_others(
    firestore_emulator: FirestoreEmulator, fdb: FirestoreDb
) -> None:
    kept = fdb.create_session(make_session("kept"))
    project = f"reset-{uuid.uuid4().hex[:8]}"
    doomed = FirestoreDb.from_url(f"firestore://{project}/(default)")
    try:
        created = doomed.create_session(make_session("doomed"))
        firestore_emulator.reset(project)
        with pytest.raises(SessionNotFound):
            doomed.get_session(created.id)
        assert fdb.get_session(kept.id) == kept
    finally:
        doomed.close()


def test_the_emulator_reports_its_host_and_environment(
    firestore_emulator: FirestoreEmulator,
) -> None:
    host = firestore_emulator.host
    assert host.startswith("127.0.0.1:")
    assert firestore_emulator.environment() == {"FIRESTORE_EMULATOR_HOST": host}

"""The SQLite backend of the db port: the embedded default, ``sqlite:///PATH``.

Layout: one table per record kind. Each row holds the record as JSON in ``doc`` (the source of
truth) plus the columns that keys, uniqueness and ordering need, copied from the record on every
write. Timestamps in those columns are integer microseconds since the Unix epoch, so they sort
and compare as numbers; a naive datetime is taken as UTC. Ties in an ordering are broken by
insertion order (the rowid).

Concurrency: each call borrows a connection from a small pool (a connection is never used by
two threads at once) and returns it afterwards, so a server that starts a thread per request
does not leak connections. Every write runs in ``BEGIN IMMEDIATE``, which takes the database's
write lock before the first read, so a compare-and-set cannot interleave with another writer in
this process or in another one; readers never block writers (WAL). A writer that finds the lock
held waits up to :data:`BUSY_TIMEOUT_SECONDS`, then fails with BackendError.

``sqlite:///:memory:`` gives a private in-memory database on a single connection behind a lock
(each SQLite connection to ``:memory:`` would otherwise be a database of its own).

Every :class:`sqlite3.Error` is translated to :class:`~hangar.errors.BackendError` here; unique
constraints become NameTaken or AlreadyExists as the port's contract says.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Final, TypeVar

from pydantic import ValidationError

from hangar.db import SessionOrder
from hangar.db.records import micros, prefix_end, prepare
from hangar.errors import (
    AlreadyExists, BackendError, CheckpointNotFound, EnvironmentNotFound, HangarError,
    InvalidInput, InvalidSettings, InvalidState, NameTaken, NotFound, SessionNotFound,
    SourcePruned, TokenNotFound, VersionConflict,
)
from hangar.models import (
    Checkpoint, Environment, Record, Session, SessionState, TickDue, Token, Turn, pruned,
    takes_no_checkpoints,
)
from hangar.private import private_dirs, private_file

SCHEMA_VERSION: Final = 2
"""Stored in ``PRAGMA user_version``; a file with a higher number is refused, a lower one is
migrated on open (2: the sessions' ``last_active_at`` column and its indexes)."""

BUSY_TIMEOUT_SECONDS: Final = 30.0
"""How long a writer waits for another writer's lock before giving up with BackendError."""

_MAX_IDLE_CONNECTIONS: Final = 8
_MEMORY: Final = ":memory:"

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " state TEXT NOT NULL, created_at INTEGER NOT NULL, version INTEGER NOT NULL,"
    " doc TEXT NOT NULL, last_active_at INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at)",
    "CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, created_at)",
    "CREATE TABLE IF NOT EXISTS turns (session_id TEXT NOT NULL, n INTEGER NOT NULL,"
    " version INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (session_id, n))",
    "CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
    " ts INTEGER NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS checkpoints_by_session ON checkpoints (session_id, ts)",
    "CREATE TABLE IF NOT EXISTS environments (name TEXT PRIMARY KEY,"
    " version INTEGER NOT NULL, doc TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL UNIQUE,"
    " created_at INTEGER NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS tokens_by_created ON tokens (created_at)",
    "CREATE TABLE IF NOT EXISTS ticks (key TEXT PRIMARY KEY, due_at INTEGER NOT NULL,"
    " version INTEGER NOT NULL, doc TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS ticks_by_due ON ticks (due_at)",
)
_ACTIVITY_INDEXES: Final = (  # after the migration to 2, which adds their column
    "CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (last_active_at, id)",
    "CREATE INDEX IF NOT EXISTS sessions_by_state_activity ON sessions"
    " (state, last_active_at, id)",
)

_ORDER_COLUMNS: Final[Mapping[str, str]] = {"created": "created_at",
                                             "activity": "last_active_at"}  # fmt: skip

R = TypeVar("R", bound=Record)


def _load(cls: type[R], doc: str) -> R:
    try:
        return cls.model_validate_json(doc)
    except ValidationError as exc:
        raise BackendError(
            f"a stored {cls.__name__} does not parse: {exc.errors()[0]['msg']}"
        ) from None


def _exists(message: str, **data: object) -> Callable[[sqlite3.IntegrityError], HangarError]:
    """A unique-constraint handler that answers AlreadyExists whatever the constraint."""
    return lambda _: AlreadyExists(message, **data)


class SqliteDb:
    """The db port on one SQLite file (or a private in-memory database). Thread-safe, and safe
    for several processes sharing one file. See the module docstring for how."""

    def __init__(self, path: Path | str) -> None:
        """Open (creating if needed) the database at ``path``, or ``":memory:"``.

        The parent folder must exist (:meth:`from_url` makes it). Raises BackendError when the
        file cannot be opened, is not a database, or has a newer schema than this code knows."""
        self._path = str(path)
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        # The in-memory database lives in exactly one connection, shared behind a lock.
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = threading.Lock()
        with self._translated():
            first = self._connect()
            try:
                self._init_schema(first)
            except BaseException:
                first.close()
                raise
        if self._path == _MEMORY:
            self._shared = first
        else:
            self._idle.append(first)

    @classmethod
    def from_url(cls, url: str) -> SqliteDb:
        """Open ``sqlite:///ABSOLUTE/PATH`` (extra leading slashes are fine, so
        ``sqlite:////abs/path`` is the same file) or ``sqlite:///:memory:``; makes the parent
        folder (0700 where it makes one) and the file (0600). InvalidSettings for any other
        shape; BackendError if the folder or file cannot be made or opened."""
        scheme, sep, rest = url.partition(":")
        if scheme != "sqlite" or not sep or not rest.startswith("///"):
            raise InvalidSettings(
                f"HANGAR_DB: {url!r} is not sqlite:///ABSOLUTE/PATH or sqlite:///:memory:",
                setting="HANGAR_DB",
            )
        path = "/" + rest.lstrip("/")
        if path == "/" + _MEMORY:
            return cls(_MEMORY)
        if path.endswith("/"):
            raise InvalidSettings(
                f"HANGAR_DB: {url!r} names a folder, not a file", setting="HANGAR_DB"
            )
        file = Path(path)
        try:
            private_dirs(file.parent)
        except OSError as exc:
            raise BackendError(f"cannot make the folder for {file}: {exc}") from None
        try:
            # Made 0600 before SQLite makes it (0644 under the usual umask): its -wal and -shm
            # files take the database's mode.
            private_file(file)
        except OSError as exc:
            raise BackendError(f"cannot make {file}: {exc.strerror}") from None
        return cls(file)

    # ----------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False: a
        # pooled connection moves between threads, but is only ever used by one at a time.
        return sqlite3.connect(
            self._path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        if self._path != _MEMORY:
            # WAL is a property of the file: set once, it stays for every later connection.
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            (found,) = conn.execute("PRAGMA user_version").fetchone()
            if found > SCHEMA_VERSION:
                raise BackendError(
                    f"{self._path} has schema version {found}; this hangar knows up to "
                    f"{SCHEMA_VERSION}: upgrade hangar",
                    schema_version=found,
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            # Migrations from older versions go here, one step per version.
            if found == 1:
                self._add_activity(conn)
            for statement in _ACTIVITY_INDEXES:
                conn.execute(statement)
            if found != SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _add_activity(conn: sqlite3.Connection) -> None:
        """Version 1 to 2: the sessions' ``last_active_at`` column, filled from each record."""
        conn.execute("ALTER TABLE sessions ADD COLUMN last_active_at INTEGER NOT NULL DEFAULT 0")
        rows = conn.execute("SELECT id, doc FROM sessions").fetchall()
        conn.executemany("UPDATE sessions SET last_active_at = ? WHERE id = ?", [
            (micros(_load(Session, doc).last_active_at), session_id) for session_id, doc in rows
        ])  # fmt: skip

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Turn sqlite3 errors into BackendError; hangar's own errors pass through."""
        try:
            yield
        except sqlite3.Error as exc:
            raise BackendError(
                f"sqlite {self._path}: {exc}",
                sqlite_error=getattr(exc, "sqlite_errorname", type(exc).__name__),
            ) from exc

    def _ensure_open(self) -> None:
        if self._closed:
            raise BackendError(f"sqlite {self._path}: the database is closed")

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """Borrow a connection for one call; it goes back to the pool (or is closed) after."""
        if self._shared is not None:
            with self._shared_lock:
                self._ensure_open()
                try:
                    yield self._shared
                finally:
                    if self._shared.in_transaction:
                        self._shared.execute("ROLLBACK")
            return
        with self._lock:
            self._ensure_open()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                with self._lock:
                    keep = not self._closed and len(self._idle) < _MAX_IDLE_CONNECTIONS
                    if keep:
                        self._idle.append(conn)
                if not keep:
                    conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the write lock from the start; rolled back on any
        error, committed otherwise."""
        with self._translated(), self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # SQLite may already have rolled back (e.g. on a full disk).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection. Idempotent; any later call raises BackendError. Connections
        borrowed at this moment are closed when they are given back."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
        with self._translated():
            for conn in idle:
                conn.close()
            if self._shared is not None:
                with self._shared_lock:
                    self._shared.close()

    # ----------------------------------------------------------------- helpers

    def _one(self, cls: type[R], sql: str, params: Sequence[object]) -> R | None:
        """The record one read finds, or None. (A single statement sees one snapshot.)"""
        with self._translated(), self._connection() as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else _load(cls, row[0])

    def _all(self, cls: type[R], sql: str, params: Sequence[object] = ()) -> list[R]:
        with self._translated(), self._connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_load(cls, row[0]) for row in rows]

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        table: str,
        columns: Mapping[str, object],
        clash: Callable[[sqlite3.IntegrityError], HangarError],
    ) -> None:
        """Insert a row; a unique constraint failing raises ``clash(error)``."""
        names, marks = ", ".join(columns), ", ".join("?" for _ in columns)
        try:
            conn.execute(
                f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(columns.values())
            )
        except sqlite3.IntegrityError as exc:
            raise clash(exc) from None

    def _create(
        self,
        table: str,
        columns: Mapping[str, object],
        clash: Callable[[sqlite3.IntegrityError], HangarError],
    ) -> None:
        with self._write() as conn:
            self._insert(conn, table, columns, clash)

    def _update(
        self,
        table: str,
        key: Mapping[str, object],
        columns: Mapping[str, object],
        expected_version: int,
        missing: NotFound,
        clash: Callable[[sqlite3.IntegrityError], HangarError] | None = None,
    ) -> None:
        """Compare-and-set: write ``columns`` and bump the version of the row with ``key``, if it
        is at ``expected_version``. Raises ``missing`` when no row has the key, VersionConflict
        when its version differs (nothing is written then), ``clash(error)`` when the write breaks
        a unique constraint."""
        where = " AND ".join(f"{name} = ?" for name in key)
        sets = ", ".join(f"{name} = ?" for name in columns)
        with self._write() as conn:
            try:
                changed = conn.execute(
                    f"UPDATE {table} SET {sets}, version = version + 1"
                    f" WHERE {where} AND version = ?",
                    (*columns.values(), *key.values(), expected_version),
                ).rowcount
            except sqlite3.IntegrityError as exc:
                if clash is None:
                    raise
                raise clash(exc) from None
            if changed == 1:
                return
            row = conn.execute(f"SELECT version FROM {table} WHERE {where}", (*key.values(),))
            found = row.fetchone()
        if found is None:
            raise missing
        raise VersionConflict(
            f"{table} {dict(key)} is at version {found[0]}, not {expected_version}: "
            "re-read and try again",
            kind=table,
            expected=expected_version,
            actual=found[0],
        )

    # ----------------------------------------------------------------- sessions

    @staticmethod
    def _session_columns(session: Session, doc: str) -> dict[str, object]:
        return {
            "id": session.id,
            "name": session.name,
            "state": session.state.value,
            "created_at": micros(session.created_at),
            "last_active_at": micros(session.last_active_at),
            "version": session.version,
            "doc": doc,
        }

    @staticmethod
    def _session_clash(session: Session) -> Callable[[sqlite3.IntegrityError], HangarError]:
        def clash(exc: sqlite3.IntegrityError) -> HangarError:
            if exc.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY":
                return AlreadyExists(f"session id {session.id!r} exists", id=session.id)
            return NameTaken(f"session name {session.name!r} is taken", name=session.name)

        return clash

    def create_session(self, session: Session) -> Session:
        """Insert at version 1; AlreadyExists if the id is taken, else NameTaken if the name is."""
        stored, doc = prepare(session, Session, 1)
        self._create("sessions", self._session_columns(stored, doc), self._session_clash(stored))
        return stored

    def get_session(self, session_id: str) -> Session:
        """SessionNotFound if there is no session with this id."""
        found = self._one(Session, "SELECT doc FROM sessions WHERE id = ?", (session_id,))
        if found is None:
            raise SessionNotFound(f"no session with id {session_id!r}", id=session_id)
        return found

    def find_session(self, name: str) -> Session:
        """The session with this name; SessionNotFound if none."""
        found = self._one(Session, "SELECT doc FROM sessions WHERE name = ?", (name,))
        if found is None:
            raise SessionNotFound(f"no session named {name!r}", name=name)
        return found

    def list_sessions(
        self, *, states: list[SessionState] | None = None, limit: int | None = None
    ) -> list[Session]:
        """Newest first by ``created_at`` (ties: the later inserted first), at most ``limit``;
        only the given states when ``states`` is set (so an empty list matches nothing)."""
        if (limit is not None and limit <= 0) or (states is not None and not states):
            return []
        sql, params = "SELECT doc FROM sessions", list[object]()
        if states is not None:
            sql += f" WHERE state IN ({', '.join('?' for _ in states)})"
            params.extend(SessionState(state).value for state in states)
        params.append(-1 if limit is None else limit)  # LIMIT -1: no limit
        return self._all(Session, sql + " ORDER BY created_at DESC, rowid DESC LIMIT ?", params)

    def sessions_of_environment(self, name: str, limit: int) -> list[Session]:
        """Up to ``limit`` sessions made from environment ``name``, newest first (a scan of
        the session documents: environments are deleted rarely)."""
        sql = ("SELECT doc FROM sessions WHERE json_extract(doc, '$.environment') = ?"
               " ORDER BY created_at DESC, rowid DESC LIMIT ?")  # fmt: skip
        return self._all(Session, sql, [name, max(limit, 0)])

    def page_sessions(
        self,
        limit: int,
        after: tuple[datetime, str] | None = None,
        *,
        state: SessionState | None = None,
        prefix: str | None = None,
        order: SessionOrder = "created",
    ) -> list[Session]:
        """One page, newest first by (``created_at``, ``id``) or, in activity order, by
        (``last_active_at``, ``id``), strictly after ``after``; only ``state`` and names
        starting with ``prefix`` when given: a search of the order's index (with the state's
        first) or a range of the name's unique one (text compares as its UTF-8 bytes:
        exactly)."""
        if limit <= 0:
            return []
        column = _ORDER_COLUMNS[order]
        where, params = list[str](), list[object]()
        if state is not None:
            where.append("state = ?")
            params.append(SessionState(state).value)
        if prefix:
            where.append("name >= ?")
            params.append(prefix)
            if (end := prefix_end(prefix)) is not None:
                where.append("name < ?")
                params.append(end)
        if after is not None:
            at = micros(after[0])
            where.append(f"({column} < ? OR ({column} = ? AND id < ?))")
            params += [at, at, after[1]]
        sql = "SELECT doc FROM sessions" + (" WHERE " + " AND ".join(where) if where else "")
        params.append(limit)
        return self._all(Session, sql + f" ORDER BY {column} DESC, id DESC LIMIT ?", params)

    def update_session(self, session: Session) -> Session:
        """Compare-and-set on ``session.version``: SessionNotFound, VersionConflict (checked
        before the name), or NameTaken for a rename to a name another session has."""
        stored, doc = prepare(session, Session, session.version + 1)
        columns = self._session_columns(stored, doc)
        del columns["id"], columns["version"]
        missing = SessionNotFound(f"no session with id {stored.id!r}", id=stored.id)
        clash = self._session_clash(stored)
        self._update("sessions", {"id": stored.id}, columns, session.version, missing, clash)
        return stored

    def delete_session(self, session_id: str) -> None:
        """Delete the session with its turns and checkpoint records, in one transaction.
        Idempotent. The checkpoints' blobs are the caller's to delete."""
        with self._write() as conn:
            conn.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # ----------------------------------------------------------------- turns

    def add_turn(self, turn: Turn) -> Turn:
        """Insert turn ``n`` of its session at version 1; AlreadyExists if the number is taken."""
        stored, doc = prepare(turn, Turn, 1)
        columns = {"session_id": stored.session_id, "n": stored.n, "version": 1, "doc": doc}
        message = f"session {stored.session_id!r} already has turn {stored.n}"
        self._create("turns", columns, _exists(message, session_id=stored.session_id, n=stored.n))
        return stored

    @staticmethod
    def _turn_missing(session_id: str, n: int) -> NotFound:
        return NotFound(f"session {session_id!r} has no turn {n}", session_id=session_id, n=n)

    def get_turn(self, session_id: str, n: int) -> Turn:
        """NotFound if the session has no turn ``n``."""
        found = self._one(
            Turn, "SELECT doc FROM turns WHERE session_id = ? AND n = ?", (session_id, n)
        )
        if found is None:
            raise self._turn_missing(session_id, n)
        return found

    def list_turns(self, session_id: str) -> list[Turn]:
        """Oldest first (by ``n``); empty for a session without turns or without a record."""
        return self._all(
            Turn, "SELECT doc FROM turns WHERE session_id = ? ORDER BY n", (session_id,)
        )

    def update_turn(self, turn: Turn) -> Turn:
        """Compare-and-set on ``turn.version``; NotFound or VersionConflict."""
        stored, doc = prepare(turn, Turn, turn.version + 1)
        key = {"session_id": stored.session_id, "n": stored.n}
        missing = self._turn_missing(stored.session_id, stored.n)
        self._update("turns", key, {"doc": doc}, turn.version, missing)
        return stored

    # ----------------------------------------------------------------- checkpoints

    def record_checkpoint(self, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        """Insert the record (version 1) and, in the same transaction, drop all but the newest
        ``keep`` of the session's checkpoints by ``ts`` (ties: the later inserted is newer),
        sparing the last good one (:func:`hangar.models.pruned`).
        Returns the dropped records, oldest first. AlreadyExists if the id is taken (nothing is
        dropped then); SessionNotFound if the session is gone (a checkpoint that finished while
        its session was deleted must not outlive it); InvalidInput if ``keep`` is below 1;
        SourcePruned if ``checkpoint.source`` is set and no longer recorded (looked up in
        ``source_session``, else this session, inside the same write transaction, which holds
        the write lock: nobody prunes it between the check and the commit). A source this call
        prunes is fine: it is checked before the prune."""
        if keep < 1:
            raise InvalidInput(f"keep must be at least 1, not {keep}", keep=keep)
        stored, doc = prepare(checkpoint, Checkpoint, 1)
        columns = {"id": stored.id, "session_id": stored.session_id, "ts": micros(stored.ts)}
        clash = _exists(f"checkpoint id {stored.id!r} exists", id=stored.id)
        with self._write() as conn:
            owner = conn.execute("SELECT doc FROM sessions WHERE id = ?",
                                 (stored.session_id,)).fetchone()  # fmt: skip
            if owner is None:
                raise SessionNotFound(
                    f"no session {stored.session_id!r}", session_id=stored.session_id
                )
            if takes_no_checkpoints(_load(Session, owner[0])):
                raise InvalidState(f"session {stored.session_id!r} is archived: it takes no "
                                   "checkpoint", session_id=stored.session_id)  # fmt: skip
            if stored.source is not None:
                self._check_source(conn, stored)
            self._insert(conn, "checkpoints", {**columns, "version": 1, "doc": doc}, clash)
            rows = conn.execute(
                "SELECT rowid, doc FROM checkpoints WHERE session_id = ? ORDER BY ts, rowid",
                (stored.session_id,),
            ).fetchall()
            # Parsed before the commit: a record that does not parse undoes the whole call.
            history = [(row[0], _load(Checkpoint, row[1])) for row in rows]
            dropped = pruned([c for _, c in history], keep, _load(Session, owner[0]))
            gone = {c.id for c in dropped}
            conn.executemany("DELETE FROM checkpoints WHERE rowid = ?",
                             [(rowid,) for rowid, c in history if c.id in gone])  # fmt: skip
        return dropped

    @staticmethod
    def _check_source(conn: sqlite3.Connection, checkpoint: Checkpoint) -> None:
        """SourcePruned unless the checkpoint ``checkpoint`` reuses is still recorded."""
        owner = checkpoint.source_session or checkpoint.session_id
        found = conn.execute("SELECT 1 FROM checkpoints WHERE id = ? AND session_id = ?",
                             (checkpoint.source, owner)).fetchone()  # fmt: skip
        if found is None:
            raise SourcePruned(
                f"checkpoint {checkpoint.source!r} of session {owner!r}, whose chunks "
                f"{checkpoint.id!r} reuses, was pruned",
                id=checkpoint.id, source=checkpoint.source, source_session=owner,
            )  # fmt: skip

    def checkpoints_using(self, session_id: str) -> list[Checkpoint]:
        """Every checkpoint record whose ``uses`` lists ``session_id``, oldest first by ``ts``
        (ties in insertion order). A scan of the checkpoint records (a few per session: the
        kept ones), each one's ``uses`` read from its JSON: the sweep that asks is rare."""
        return self._all(
            Checkpoint,
            "SELECT doc FROM checkpoints WHERE EXISTS (SELECT 1 FROM json_each(doc, '$.uses')"
            " WHERE value = ?) ORDER BY ts, rowid",
            (session_id,),
        )

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Oldest first, newest last (by ``ts``; ties in insertion order)."""
        return self._all(
            Checkpoint,
            "SELECT doc FROM checkpoints WHERE session_id = ? ORDER BY ts, rowid",
            (session_id,),
        )

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint:
        """CheckpointNotFound unless this session has a checkpoint with this id."""
        found = self._one(
            Checkpoint,
            "SELECT doc FROM checkpoints WHERE id = ? AND session_id = ?",
            (checkpoint_id, session_id),
        )
        if found is None:
            raise CheckpointNotFound(
                f"session {session_id!r} has no checkpoint {checkpoint_id!r}",
                session_id=session_id,
                id=checkpoint_id,
            )
        return found

    def delete_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Drop every checkpoint record of the session; returns them oldest first."""
        with self._write() as conn:
            rows = conn.execute(
                "SELECT doc FROM checkpoints WHERE session_id = ? ORDER BY ts, rowid",
                (session_id,),
            ).fetchall()
            records = [_load(Checkpoint, row[0]) for row in rows]
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
        return records

    # ----------------------------------------------------------------- environments

    def create_environment(self, env: Environment) -> Environment:
        """Insert at version 1; AlreadyExists if the name is taken."""
        stored, doc = prepare(env, Environment, 1)
        clash = _exists(f"environment {stored.name!r} exists", name=stored.name)
        self._create("environments", {"name": stored.name, "version": 1, "doc": doc}, clash)
        return stored

    @staticmethod
    def _environment_missing(name: str) -> EnvironmentNotFound:
        return EnvironmentNotFound(f"no environment named {name!r}", name=name)

    def get_environment(self, name: str) -> Environment:
        """EnvironmentNotFound if there is none by this name."""
        found = self._one(Environment, "SELECT doc FROM environments WHERE name = ?", (name,))
        if found is None:
            raise self._environment_missing(name)
        return found

    def list_environments(self) -> list[Environment]:
        """By name."""
        return self._all(Environment, "SELECT doc FROM environments ORDER BY name")

    def update_environment(self, env: Environment) -> Environment:
        """Compare-and-set on ``env.version``; EnvironmentNotFound or VersionConflict."""
        stored, doc = prepare(env, Environment, env.version + 1)
        missing = self._environment_missing(stored.name)
        self._update("environments", {"name": stored.name}, {"doc": doc}, env.version, missing)
        return stored

    def delete_environment(self, name: str) -> None:
        """Idempotent."""
        with self._write() as conn:
            conn.execute("DELETE FROM environments WHERE name = ?", (name,))

    # ----------------------------------------------------------------- tokens

    def create_token(self, token: Token) -> Token:
        """Insert at version 1; AlreadyExists if the id, or the secret's hash, is taken."""
        stored, doc = prepare(token, Token, 1)
        columns: dict[str, object] = {"id": stored.id, "secret_hash": stored.secret_hash}
        columns |= {"created_at": micros(stored.created_at), "version": 1, "doc": doc}
        clash = _exists(f"token {stored.id!r} (or one with its secret) exists", id=stored.id)
        self._create("tokens", columns, clash)
        return stored

    def find_token(self, secret_hash: str) -> Token:
        """The token whose secret hashes to this; TokenNotFound if none."""
        found = self._one(Token, "SELECT doc FROM tokens WHERE secret_hash = ?", (secret_hash,))
        if found is None:
            # The hash identifies a credential: keep it out of the error.
            raise TokenNotFound("no token has this secret")
        return found

    def list_tokens(self) -> list[Token]:
        """Oldest first by ``created_at`` (ties in insertion order)."""
        return self._all(Token, "SELECT doc FROM tokens ORDER BY created_at, rowid")

    def take_token(self, secret_hash: str) -> Token:
        """Find and delete the token in one write transaction (which holds the write lock
        from its first read, so two takers cannot both find it); TokenNotFound if none."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT id, doc FROM tokens WHERE secret_hash = ?", (secret_hash,)
            ).fetchone()
            if row is None:
                raise TokenNotFound("no token has this secret")  # the hash stays out of it
            conn.execute("DELETE FROM tokens WHERE id = ?", (row[0],))
        return _load(Token, row[1])

    def delete_token(self, token_id: str) -> None:
        """Idempotent."""
        with self._write() as conn:
            conn.execute("DELETE FROM tokens WHERE id = ?", (token_id,))

    # ----------------------------------------------------------------- tick due-times

    def set_due(self, due: TickDue) -> TickDue:
        """Create (version 1) or move (version + 1) the due-time with ``due.key``. An upsert,
        not a compare-and-set: the version passed in is ignored."""
        with self._write() as conn:
            row = conn.execute("SELECT version FROM ticks WHERE key = ?", (due.key,)).fetchone()
            stored, doc = prepare(due, TickDue, 1 if row is None else row[0] + 1)
            conn.execute(
                "INSERT INTO ticks (key, due_at, version, doc) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET"
                " due_at = excluded.due_at, version = excluded.version, doc = excluded.doc",
                (stored.key, micros(stored.due_at), stored.version, doc),
            )
        return stored

    def get_due(self, key: str) -> TickDue | None:
        """The due-time with this key, or None."""
        found = self._all(TickDue, "SELECT doc FROM ticks WHERE key = ?", (key,))
        return found[0] if found else None

    def list_due(self, before: datetime, limit: int = 100) -> list[TickDue]:
        """Due-times at or before ``before``, earliest first (ties by key), at most ``limit``."""
        if limit <= 0:
            return []
        return self._all(
            TickDue,
            "SELECT doc FROM ticks WHERE due_at <= ? ORDER BY due_at, key LIMIT ?",
            (micros(before), limit),
        )

    def clear_due(
        self, key: str, version: int | None = None, due_at: datetime | None = None
    ) -> bool:
        """Remove the due-time; with ``version`` and/or ``due_at``, only if the stored one still
        has them (not moved since it was read). Returns whether a row was removed."""
        sql, params = "DELETE FROM ticks WHERE key = ?", list[object]([key])
        if version is not None:
            sql += " AND version = ?"
            params.append(version)
        if due_at is not None:
            sql += " AND due_at = ?"
            params.append(micros(due_at))
        with self._write() as conn:
            return conn.execute(sql, params).rowcount > 0

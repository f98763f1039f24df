"""The Firestore backend of the db port: ``firestore://PROJECT/DATABASE[/PREFIX]``.

Layout: one collection per record kind, at the root or, when the URL names a prefix, under the
document ``spaces/PREFIX`` (tests give each test its own). The collection IDs stay ``sessions``,
``turns``, ``checkpoints``, ``ticks``... either way, so Terraform's composite indexes (which
apply per collection ID) serve both. A document holds the record as JSON in ``doc`` (the source
of truth: every field round-trips exactly, and map keys Firestore refuses as field names are
just text there), its ``version``, and the fields uniqueness and queries need, as native values
(timestamps for times, to the microsecond)::

    sessions/{id}              doc, version, name, state, environment, created_at,
                               last_active_at
    session_names/{name}       session_id            the name lock: one per taken name
    turns/{session_id}.{n}     doc, version, session_id, n
    checkpoints/{id}           doc, version, session_id, ts, uses
    environments/{name}        doc, version, name
    tokens/{id}                doc, version, secret_hash, created_at
    token_hashes/{hash}        token_id              the secret's lock: one token per secret
    ticks/{key}                doc, version, key, due_at

Keys become document IDs with ``%`` and ``/`` escaped (``%25``, ``%2F``) and the IDs Firestore
reserves (empty, ``.``, ``..``, ``__*__``) prefixed with ``%``. Ties in an ordering go by
document ID, not by insertion order as in SQLite.

Transactions: a method that reads and then writes is one transaction, re-run by the client when
Firestore aborts it for contention (VersionConflict after :data:`MAX_ATTEMPTS`). A create
without a read is one batch with ``exists=False`` preconditions, sent once (a retried commit
that had landed would come back as "exists"). ``delete_session`` removes the session and its
name lock in one transaction, then its turns and checkpoint records in batches; records left by
a call cut short belong to no session, and calling it again removes them.

Reads, queries and batches give up after ``timeout`` seconds, retrying transient errors until
then; a transaction's begin and commit keep the client's defaults (up to 60 s). A record over
:data:`MAX_RECORD_BYTES` of JSON is InvalidInput before anything is sent. Every google.api_core,
google.auth and grpc error is translated here and never escapes. Nothing happens at import or
construction: google.cloud.firestore is imported (about 0.7 s) and the client built on the first
call; it honours ``FIRESTORE_EMULATOR_HOST`` itself (anonymous credentials, project from the URL).
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import ValidationError

from hangar.db import SessionOrder
from hangar.db.records import micros, prefix_end, prepare, utc
from hangar.errors import (
    AlreadyExists, BackendError, CheckpointNotFound, EnvironmentNotFound, HangarError,
    InvalidInput, InvalidSettings, InvalidState, NameTaken, NotFound, SessionNotFound,
    SourcePruned, TokenNotFound, VersionConflict,
)
from hangar.gcloud import translate, vendor_errors
from hangar.models import (
    Checkpoint, Environment, Record, Session, SessionState, TickDue, Token, Turn, pruned,
    takes_no_checkpoints,
)

if TYPE_CHECKING:
    from google.cloud.firestore_v1 import (
        Client, CollectionReference, DocumentReference, DocumentSnapshot, Query, Transaction,
    )

    Snapshot = DocumentSnapshot[DocumentReference]
    Writes = list[tuple[DocumentReference, dict[str, Any]]]

DEFAULT_TIMEOUT_SECONDS: Final = 30.0
MAX_ATTEMPTS: Final = 5
"""Runs of a transaction that Firestore keeps aborting for contention, before VersionConflict."""
DUE_ROUNDS: Final = 4
"""Transactions (of MAX_ATTEMPTS each) a contended due-time upsert, or token take, gets before
it gives up."""
_ORDER_FIELDS: Final = {"created": "created_at", "activity": "last_active_at"}
MAX_RECORD_BYTES: Final = 1_000_000
"""The largest record stored, as JSON: Firestore keeps at most 1 MiB per document, its name and
indexed fields included."""

_SETTING: Final = "HANGAR_DB"
_PAGE: Final = 400
_MAX_ID_BYTES: Final = 1500
_PROJECT = re.compile(r"^(?:[a-z0-9.-]+:)?[a-z0-9][a-z0-9-]{0,62}$")
_DATABASE = re.compile(r"^(?:\(default\)|[a-z][a-z0-9-]{2,61}[a-z0-9])$")
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_RESERVED = re.compile(r"^(?:|\.|\.\.|__.*__)$", re.DOTALL)

R = TypeVar("R", bound=Record)
T = TypeVar("T")


def _doc_id(key: str) -> str:
    """A document ID for ``key``: one-to-one, readable, and never one Firestore refuses."""
    escaped = key.replace("%", "%25").replace("/", "%2F")
    if _RESERVED.match(escaped):
        escaped = "%" + escaped
    if len(escaped.encode()) > _MAX_ID_BYTES:
        raise InvalidInput(f"a key of {len(key)} characters is too long for Firestore",
                           key=key[:80])  # fmt: skip
    return escaped


def _prepare(record: Record, cls: type[R], version: int) -> tuple[R, str]:
    """The stored copy and its JSON; InvalidInput over Firestore's document size."""
    return prepare(record, cls, version, max_bytes=MAX_RECORD_BYTES, store="Firestore")


def _fields(stored: Record, doc: str, **indexed: Any) -> dict[str, Any]:
    """A document's fields: the record's JSON, its version, and the fields queries need."""
    return {"doc": doc, "version": stored.version, **indexed}


def _load(cls: type[R], snap: Snapshot) -> R:
    """The record a snapshot holds; BackendError if it has none or it does not parse."""
    try:
        return cls.model_validate_json(snap.get("doc"))
    except (KeyError, ValidationError) as exc:
        detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else "no record"
        raise BackendError(f"the stored {cls.__name__} {snap.id!r} does not parse: {detail}",
                           id=snap.id) from None  # fmt: skip


def _check_source(checkpoint: Checkpoint, source: Snapshot) -> None:
    """SourcePruned unless ``source`` (read in the transaction) is the record of the checkpoint
    ``checkpoint`` reuses, in the session it names."""
    owner = checkpoint.source_session or checkpoint.session_id
    if not source.exists or source.get("session_id") != owner:
        raise SourcePruned(
            f"checkpoint {checkpoint.source!r} of session {owner!r}, whose chunks "
            f"{checkpoint.id!r} reuses, was pruned",
            id=checkpoint.id, source=checkpoint.source, source_session=owner,
        )  # fmt: skip


def _filter(field: str, op: str, value: object) -> Any:
    from google.cloud.firestore import FieldFilter

    return FieldFilter(field, op, value)


@functools.cache
def _vendor() -> SimpleNamespace:
    """The vendor exception types, imported on first need."""
    from google.api_core import exceptions as api

    return SimpleNamespace(exists=api.AlreadyExists, aborted=api.Aborted, any=vendor_errors())


def _stale(kind: str, key: object, expected: int, actual: object) -> VersionConflict:
    return VersionConflict(
        f"{kind} {key!r} is at version {actual}, not {expected}: re-read and try again",
        kind=kind, expected=expected, actual=actual,
    )  # fmt: skip


class FirestoreDb:
    """The db port on one Firestore database (optionally one prefix in it). Thread-safe: the
    client is shared, each call makes its own requests. See the module docstring."""

    def __init__(self, project: str, database: str = "(default)", prefix: str = "", *,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:  # fmt: skip
        """Remember where the data lives; contacts nothing (the client is built on first use)."""
        self.project, self.database, self.prefix = project, database, prefix
        self.timeout = timeout
        self._base: tuple[str, ...] = ("spaces", prefix) if prefix else ()
        self._where = f"firestore://{project}/{database}" + (f"/{prefix}" if prefix else "")
        self._client: Client | None = None
        self._calls: dict[str, Any] = {}
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> FirestoreDb:
        """``firestore://PROJECT/DATABASE`` or ``firestore://PROJECT/DATABASE/PREFIX``
        (DATABASE may be ``(default)``; PREFIX is one segment of letters, digits and ``_.-``).
        InvalidSettings naming HANGAR_DB for anything else. Contacts nothing."""
        scheme, sep, rest = url.partition("://")
        parts = rest.split("/")
        ok = (
            scheme == "firestore" and sep == "://" and len(parts) in (2, 3)
            and _PROJECT.match(parts[0]) is not None and _DATABASE.match(parts[1]) is not None
            and (len(parts) == 2 or (_PREFIX.match(parts[2]) is not None
                                     and _RESERVED.match(parts[2]) is None))
        )  # fmt: skip
        if not ok:
            raise InvalidSettings(
                f"{_SETTING}: {url!r} is not firestore://PROJECT/DATABASE or "
                'firestore://PROJECT/DATABASE/PREFIX (DATABASE may be "(default)")',
                setting=_SETTING,
            )
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else "", timeout=timeout)

    # ----------------------------------------------------------------- plumbing

    def _get_client(self) -> Client:
        with self._lock:
            if self._closed:
                raise BackendError(f"{self._where}: the database is closed")
            if self._client is None:
                from google.api_core.retry import Retry, if_transient_error
                from google.cloud.firestore import Client

                retry = Retry(predicate=if_transient_error, initial=0.1, maximum=2.0,
                              multiplier=2.0, timeout=self.timeout)  # fmt: skip
                self._calls = {"retry": retry, "timeout": self.timeout}
                self._client = Client(project=self.project, database=self.database)
            return self._client

    def _col(self, name: str) -> CollectionReference:
        return self._get_client().collection(*self._base, name)

    def _ref(self, collection: str, key: str) -> DocumentReference:
        return self._col(collection).document(_doc_id(key))

    def _turn(self, session_id: str, n: int) -> DocumentReference:
        # The session's ID part never ends in ".<digits>": the last dot splits the two.
        return self._col("turns").document(f"{_doc_id(session_id)}.{n}")

    @contextlib.contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        """Turn vendor errors into hangar errors; hangar's own errors pass through."""
        vendor = _vendor()
        try:
            yield
        except vendor.aborted as exc:
            raise VersionConflict(f"{self._where}: {action}: contention ({exc.message}); "
                                  "re-read and try again") from None  # fmt: skip
        except vendor.any as exc:
            raise translate(exc, f"{self._where}: cannot {action}") from None
        except ValueError as exc:
            # The client wraps the last Aborted of a transaction that used every attempt in a
            # ValueError; any other ValueError is a bug and passes through.
            if not isinstance(exc.__cause__, vendor.aborted):
                raise
            raise VersionConflict(f"{self._where}: {action}: still contended after "
                                  f"{MAX_ATTEMPTS} attempts; re-read and try again") from None

    def _transact(self, action: str, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in one transaction (re-run when Firestore aborts it); its reads must
        come before its writes, and a hangar error it raises rolls the transaction back."""
        from google.cloud.firestore import transactional

        with self._translated(action):
            transaction = self._get_client().transaction(max_attempts=MAX_ATTEMPTS)
            result: T = transactional(body)(transaction)
            return result

    def _transact_contended(self, action: str, body: Callable[[Transaction], T]) -> T:
        """:meth:`_transact`, run again after a short back-off (up to :data:`DUE_ROUNDS`
        times) while it ends in VersionConflict: for a transaction whose every run is correct
        on its own (it re-reads what it decides on), so contention should not fail it."""
        for attempt in range(1, DUE_ROUNDS + 1):
            try:
                return self._transact(action, body)
            except VersionConflict:
                if attempt == DUE_ROUNDS:
                    raise
                time.sleep(random.uniform(0.02, 0.1) * attempt)
        raise AssertionError("unreachable")

    def _read(self, tx: Transaction, *refs: DocumentReference) -> list[Snapshot]:
        """Snapshots of ``refs`` in the transaction, in their order (one request)."""
        found = {snap.reference.path: snap for snap in tx.get_all(list(refs), **self._calls)}
        return [found[ref.path] for ref in refs]

    def _fetch(self, cls: type[R], ref: DocumentReference, action: str) -> R | None:
        with self._translated(action):
            snap = ref.get(**self._calls)
        return _load(cls, snap) if snap.exists else None

    def _query(self, cls: type[R], query: Query | CollectionReference, action: str) -> list[R]:
        with self._translated(action):
            snaps = list(query.stream(**self._calls))
        return [_load(cls, snap) for snap in snaps]

    def _create(self, writes: Writes, action: str, clash: Callable[[], HangarError]) -> None:
        """Create the documents in one batch, only if none exists; ``clash()`` if one does.
        Sent once (no retry): a retried commit that had landed would look like a clash."""
        with self._translated(action):
            batch = self._get_client().batch()
            for ref, fields in writes:
                batch.create(ref, fields)
            try:
                batch.commit(retry=None, timeout=self.timeout)
            except _vendor().exists:
                raise clash() from None

    def _compare_and_set(self, ref: DocumentReference, fields: dict[str, Any], expected: int,
                         missing: NotFound, action: str) -> None:  # fmt: skip
        def body(tx: Transaction) -> None:
            (current,) = self._read(tx, ref)
            if not current.exists:
                raise missing
            if current.get("version") != expected:
                raise _stale(ref.parent.id, ref.id, expected, current.get("version"))
            tx.set(ref, fields)

        self._transact(action, body)

    def _delete_locked(self, ref: DocumentReference, record_id: str, locks: str, key_field: str,
                       owner_field: str, action: str) -> None:  # fmt: skip
        """Delete a record and, in the same transaction, its lock ``locks/{record[key_field]}``
        if that still names ``record_id`` (in ``owner_field``). Idempotent."""

        def body(tx: Transaction) -> None:
            (current,) = self._read(tx, ref)
            if not current.exists:
                return
            lock = self._ref(locks, current.get(key_field))
            (owner,) = self._read(tx, lock)
            if owner.exists and owner.get(owner_field) == record_id:
                tx.delete(lock)
            tx.delete(ref)

        self._transact(action, body)

    def _sweep(self, collection: str, session_id: str, action: str) -> None:
        """Delete every document of ``collection`` with this ``session_id``, in batches."""
        # index: automatic single-field (session_id)
        query = (self._col(collection).where(filter=_filter("session_id", "==", session_id))
                 .select([]).limit(_PAGE))  # fmt: skip
        with self._translated(action):
            while refs := [snap.reference for snap in query.stream(**self._calls)]:
                batch = self._get_client().batch()
                for ref in refs:
                    batch.delete(ref)
                batch.commit(**self._calls)

    def close(self) -> None:
        """Close the client's channel. Idempotent; any later call raises BackendError."""
        with self._lock:
            client, self._client, self._closed = self._client, None, True
        if client is not None:
            with self._translated("close"):
                client.close()  # type: ignore[no-untyped-call]

    # ----------------------------------------------------------------- sessions

    @staticmethod
    def _session_fields(session: Session, doc: str) -> dict[str, Any]:
        return _fields(session, doc, name=session.name, state=session.state.value,
                       environment=session.environment,
                       created_at=utc(session.created_at),
                       last_active_at=utc(session.last_active_at))  # fmt: skip

    def create_session(self, session: Session) -> Session:
        """Insert at version 1, with the name lock, in one transaction; AlreadyExists if the id
        is taken, else NameTaken if the name is."""
        stored, doc = _prepare(session, Session, 1)
        ref, lock = self._ref("sessions", stored.id), self._ref("session_names", stored.name)

        def body(tx: Transaction) -> None:
            existing, taken = self._read(tx, ref, lock)
            if existing.exists:
                raise AlreadyExists(f"session id {stored.id!r} exists", id=stored.id)
            if taken.exists:
                raise NameTaken(f"session name {stored.name!r} is taken", name=stored.name)
            tx.create(ref, self._session_fields(stored, doc))
            tx.create(lock, {"session_id": stored.id})

        self._transact("create a session", body)
        return stored

    def get_session(self, session_id: str) -> Session:
        """SessionNotFound if there is no session with this id."""
        found = self._fetch(Session, self._ref("sessions", session_id), "read a session")
        if found is None:
            raise SessionNotFound(f"no session with id {session_id!r}", id=session_id)
        return found

    def find_session(self, name: str) -> Session:
        """The session with this name; SessionNotFound if none."""
        # index: automatic single-field (name)
        query = self._col("sessions").where(filter=_filter("name", "==", name)).limit(1)
        found = self._query(Session, query, "find a session")
        if not found:
            raise SessionNotFound(f"no session named {name!r}", name=name)
        return found[0]

    def list_sessions(
        self, *, states: list[SessionState] | None = None, limit: int | None = None
    ) -> list[Session]:
        """Newest first by ``created_at`` (ties by id, descending), at most ``limit``; only the
        given states when ``states`` is set (so an empty list matches nothing)."""
        if (limit is not None and limit <= 0) or (states is not None and not states):
            return []
        query: Query | CollectionReference = self._col("sessions")
        if states is not None:
            wanted = sorted({SessionState(state).value for state in states})
            # index: sessions (state ASC, created_at DESC), declared in terraform
            query = query.where(filter=_filter("state", "in", wanted))
        # index without states: automatic single-field (created_at)
        query = query.order_by("created_at", direction="DESCENDING")
        return self._query(Session, query if limit is None else query.limit(limit),
                           "list sessions")  # fmt: skip

    def sessions_of_environment(self, name: str, limit: int) -> list[Session]:
        """Up to ``limit`` sessions made from environment ``name``, newest first (sorted here:
        the query uses the automatic single-field index on ``environment``)."""
        if limit <= 0:
            return []
        query = self._col("sessions").where(filter=_filter("environment", "==", name))
        found = self._query(Session, query.limit(limit), "find an environment's sessions")
        return sorted(found, key=lambda s: (s.created_at, s.id), reverse=True)

    def page_sessions(
        self,
        limit: int,
        after: tuple[datetime, str] | None = None,
        *,
        state: SessionState | None = None,
        prefix: str | None = None,
        order: SessionOrder = "created",
    ) -> list[Session]:
        """One page, newest first by (``created_at``, document id = ``id``) or, in activity
        order, by (``last_active_at``, id), strictly after ``after``; only ``state`` and names
        starting with ``prefix`` when given. One query, or with a prefix up to three (see
        :meth:`_page_named`). A session written by a hangar from before ``last_active_at`` was
        a field has none, and is in no page by activity until it is written again (as
        :func:`hangar.db.migrations.migrate` does)."""
        if limit <= 0:
            return []
        field = _ORDER_FIELDS[order]
        matching: Query | CollectionReference = self._col("sessions")
        if state is not None:
            matching = matching.where(filter=_filter("state", "==", SessionState(state).value))
        if prefix:
            return self._page_named(matching, limit, after, prefix, field)
        # index: automatic single-field (created_at, last_active_at) read backwards, or with a
        # state sessions (state ASC, FIELD DESC), declared in terraform; ties by document name
        query = matching.order_by(field, direction="DESCENDING")
        query = query.order_by("__name__", direction="DESCENDING")
        if after is not None:
            query = query.start_after({field: utc(after[0]),
                                       "__name__": self._ref("sessions", after[1])})  # fmt: skip
        # only the record's JSON comes back (the indexed copies of its fields are not needed)
        return self._query(Session, query.limit(limit).select(["doc"]), "page sessions")

    def _page_named(self, matching: Query | CollectionReference, limit: int,
                    after: tuple[datetime, str] | None, prefix: str,
                    field: str) -> list[Session]:  # fmt: skip
        """A page of the sessions ``matching`` finds whose name starts with ``prefix``, by
        ``field`` (``created_at`` or ``last_active_at``).

        The prefix is a range on ``name`` and the cursor one on ``field`` (Firestore's ranges
        on several fields). Firestore orders the results by every range's field before the
        document name, so ties in ``field`` come by name, not by id: the sessions at the
        cursor's instant and at the page's last one are read whole, by equality on ``field``
        (a handful at most: times are to the microsecond; the second read only when the page
        ends inside such a tie), and the page is put in the port's order here."""
        named = matching.where(filter=_filter("name", ">=", prefix))
        if (end := prefix_end(prefix)) is not None:
            named = named.where(filter=_filter("name", "<", end))
        page: list[Session] = []
        if after is not None:
            page = [s for s in self._made_at(matching, after[0], prefix, field)
                    if _doc_id(s.id) < _doc_id(after[1])]  # fmt: skip
            named = named.where(filter=_filter(field, "<", utc(after[0])))
        # index: sessions (FIELD DESC, name DESC), with a state (state ASC, FIELD DESC, name
        # DESC), declared in terraform: equality, then order, then range fields
        query = named.order_by(field, direction="DESCENDING")
        query = query.order_by("name", direction="DESCENDING").limit(limit + 1)
        older = self._query(Session, query.select(["doc"]), "page sessions")

        def key(s: Session) -> datetime:
            return s.created_at if field == "created_at" else s.last_active_at

        cut = limit - len(page)  # the page's share of ``older``
        if 0 < cut < len(older) and key(older[cut]) == key(older[cut - 1]):
            last = key(older[cut])
            older = [s for s in older if key(s) != last]
            older += self._made_at(matching, last, prefix, field)
        page += older
        page.sort(key=lambda s: (key(s), _doc_id(s.id)), reverse=True)
        return page[:limit]

    def _made_at(self, matching: Query | CollectionReference, at: datetime,
                 prefix: str, field: str) -> list[Session]:  # fmt: skip
        """Every session ``matching`` finds whose ``field`` is ``at`` exactly and whose name
        starts with ``prefix`` (checked here: the instant holds a handful at most)."""
        # index: automatic single-field (FIELD), merged with state's when there is one
        query = matching.where(filter=_filter(field, "==", utc(at))).select(["doc"])
        found = self._query(Session, query, "page sessions")
        return [s for s in found if s.name.startswith(prefix)]

    def update_session(self, session: Session) -> Session:
        """Compare-and-set on ``session.version``: SessionNotFound, VersionConflict (checked
        before the name), or NameTaken for a rename to a name another session has. A rename
        moves the name lock in the same transaction."""
        stored, doc = _prepare(session, Session, session.version + 1)
        ref, lock = self._ref("sessions", stored.id), self._ref("session_names", stored.name)

        def body(tx: Transaction) -> None:
            current, taken = self._read(tx, ref, lock)
            if not current.exists:
                raise SessionNotFound(f"no session with id {stored.id!r}", id=stored.id)
            if current.get("version") != session.version:
                raise _stale("session", stored.id, session.version, current.get("version"))
            if current.get("name") != stored.name:
                if taken.exists and taken.get("session_id") != stored.id:
                    raise NameTaken(f"session name {stored.name!r} is taken", name=stored.name)
                old = self._ref("session_names", current.get("name"))
                (owner,) = self._read(tx, old)
                if owner.exists and owner.get("session_id") == stored.id:
                    tx.delete(old)
                tx.set(lock, {"session_id": stored.id})
            tx.set(ref, self._session_fields(stored, doc))

        self._transact("update a session", body)
        return stored

    def delete_session(self, session_id: str) -> None:
        """Delete the session and its name lock in one transaction, then its turns and
        checkpoint records in batches. Idempotent (a second call also finishes a first one that
        was cut short). The checkpoints' blobs are the caller's to delete."""
        ref = self._ref("sessions", session_id)
        self._delete_locked(ref, session_id, "session_names", "name", "session_id",
                            "delete a session")  # fmt: skip
        self._sweep("turns", session_id, "delete a session's turns")
        self._sweep("checkpoints", session_id, "delete a session's checkpoints")

    # ----------------------------------------------------------------- turns

    def add_turn(self, turn: Turn) -> Turn:
        """Insert turn ``n`` of its session at version 1; AlreadyExists if the number is taken."""
        stored, doc = _prepare(turn, Turn, 1)
        fields = _fields(stored, doc, session_id=stored.session_id, n=stored.n)
        self._create([(self._turn(stored.session_id, stored.n), fields)], "add a turn",
                     lambda: AlreadyExists(
                         f"session {stored.session_id!r} already has turn {stored.n}",
                         session_id=stored.session_id, n=stored.n))  # fmt: skip
        return stored

    @staticmethod
    def _turn_missing(session_id: str, n: int) -> NotFound:
        return NotFound(f"session {session_id!r} has no turn {n}", session_id=session_id, n=n)

    def get_turn(self, session_id: str, n: int) -> Turn:
        """NotFound if the session has no turn ``n``."""
        found = self._fetch(Turn, self._turn(session_id, n), "read a turn")
        if found is None:
            raise self._turn_missing(session_id, n)
        return found

    def list_turns(self, session_id: str) -> list[Turn]:
        """Oldest first (by ``n``); empty for a session without turns or without a record."""
        # index: turns (session_id ASC, n ASC), declared in terraform
        query = self._col("turns").where(filter=_filter("session_id", "==", session_id))
        return self._query(Turn, query.order_by("n"), "list turns")

    def update_turn(self, turn: Turn) -> Turn:
        """Compare-and-set on ``turn.version``; NotFound or VersionConflict."""
        stored, doc = _prepare(turn, Turn, turn.version + 1)
        fields = _fields(stored, doc, session_id=stored.session_id, n=stored.n)
        self._compare_and_set(self._turn(stored.session_id, stored.n), fields, turn.version,
                              self._turn_missing(stored.session_id, stored.n), "update a turn")
        return stored

    # ----------------------------------------------------------------- checkpoints

    def _checkpoints_of(self, session_id: str) -> Query:
        # index: checkpoints (session_id ASC, ts ASC), declared in terraform
        query = self._col("checkpoints").where(filter=_filter("session_id", "==", session_id))
        return query.order_by("ts")

    def record_checkpoint(self, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        """Insert the record (version 1) and, in the same transaction, drop all but the newest
        ``keep`` of the session's checkpoints by ``ts`` (ties: by id), sparing the last good one
        (:func:`hangar.models.pruned`). Returns the dropped
        records, oldest first; the new one is among them, and not stored, when it is older than
        the ``keep`` newest. AlreadyExists if the id is taken (nothing is dropped then);
        SessionNotFound if the session is gone; InvalidInput if ``keep`` is below 1;
        SourcePruned if ``checkpoint.source`` is set and its document (of ``source_session``,
        else this session) is gone. That document is read in the transaction, so a prune or
        delete of it committed before ours commits aborts ours, and the re-run sees it gone. A
        source this call prunes is fine: it is read before the prune."""
        if keep < 1:
            raise InvalidInput(f"keep must be at least 1, not {keep}", keep=keep)
        stored, doc = _prepare(checkpoint, Checkpoint, 1)
        ref, session = self._ref("checkpoints", stored.id), self._ref("sessions", stored.session_id)
        reads = [session, ref]
        if stored.source is not None:
            reads.append(self._ref("checkpoints", stored.source))
        query = self._checkpoints_of(stored.session_id)
        fields = _fields(stored, doc, session_id=stored.session_id, ts=utc(stored.ts),
                         uses=stored.uses)  # fmt: skip

        def body(tx: Transaction) -> list[Checkpoint]:
            owner, existing, *reused = self._read(tx, *reads)
            history = list(tx.get(query, **self._calls))
            if not owner.exists:
                raise SessionNotFound(f"no session {stored.session_id!r}",
                                      session_id=stored.session_id)  # fmt: skip
            if takes_no_checkpoints(_load(Session, owner)):
                raise InvalidState(f"session {stored.session_id!r} is archived: it takes no "
                                   "checkpoint", session_id=stored.session_id)  # fmt: skip
            if existing.exists:
                raise AlreadyExists(f"checkpoint id {stored.id!r} exists", id=stored.id)
            if reused:
                _check_source(stored, reused[0])
            # Parsed before the commit: a record that does not parse undoes the whole call.
            ranked: list[tuple[int, str, Snapshot | None, Checkpoint]] = [
                (micros(snap.get("ts")), snap.id, snap, _load(Checkpoint, snap))
                for snap in history
            ]
            ranked.append((micros(stored.ts), ref.id, None, stored))
            ranked.sort(key=lambda entry: entry[:2])
            dropped = pruned([c for *_, c in ranked], keep, _load(Session, owner))
            gone = {c.id for c in dropped}
            for _, snap_id, snap, _ in ranked:
                if snap is not None and snap_id in gone:
                    tx.delete(snap.reference)
            if stored.id not in gone:
                tx.create(ref, fields)
            return dropped

        return self._transact("record a checkpoint", body)

    def checkpoints_using(self, session_id: str) -> list[Checkpoint]:
        """Every checkpoint record whose ``uses`` lists ``session_id``, oldest first by ``ts``
        (ties by id; sorted here, so no composite index is needed)."""
        # index: automatic single-field (uses, array-contains)
        query = self._col("checkpoints").where(filter=_filter("uses", "array_contains",
                                                              session_id))  # fmt: skip
        found = self._query(Checkpoint, query.select(["doc"]), "find checkpoints using a session")
        return sorted(found, key=lambda c: (micros(c.ts), _doc_id(c.id)))

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Oldest first, newest last (by ``ts``; ties by id)."""
        return self._query(Checkpoint, self._checkpoints_of(session_id), "list checkpoints")

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint:
        """CheckpointNotFound unless this session has a checkpoint with this id."""
        found = self._fetch(Checkpoint, self._ref("checkpoints", checkpoint_id),
                            "read a checkpoint")  # fmt: skip
        if found is None or found.session_id != session_id:
            raise CheckpointNotFound(
                f"session {session_id!r} has no checkpoint {checkpoint_id!r}",
                session_id=session_id, id=checkpoint_id,
            )  # fmt: skip
        return found

    def delete_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Drop every checkpoint record of the session in one transaction; returns them oldest
        first."""
        query = self._checkpoints_of(session_id)

        def body(tx: Transaction) -> list[Checkpoint]:
            snaps = list(tx.get(query, **self._calls))
            records = [_load(Checkpoint, snap) for snap in snaps]
            for snap in snaps:
                tx.delete(snap.reference)
            return records

        return self._transact("delete checkpoints", body)

    # ----------------------------------------------------------------- environments

    def create_environment(self, env: Environment) -> Environment:
        """Insert at version 1; AlreadyExists if the name is taken."""
        stored, doc = _prepare(env, Environment, 1)
        writes: Writes = [(self._ref("environments", stored.name),
                           _fields(stored, doc, name=stored.name))]  # fmt: skip
        self._create(writes, "create an environment", lambda: AlreadyExists(
            f"environment {stored.name!r} exists", name=stored.name))  # fmt: skip
        return stored

    def get_environment(self, name: str) -> Environment:
        """EnvironmentNotFound if there is none by this name."""
        found = self._fetch(Environment, self._ref("environments", name), "read an environment")
        if found is None:
            raise EnvironmentNotFound(f"no environment named {name!r}", name=name)
        return found

    def list_environments(self) -> list[Environment]:
        """By name."""
        # index: automatic single-field (name)
        query = self._col("environments").order_by("name")
        return self._query(Environment, query, "list environments")

    def update_environment(self, env: Environment) -> Environment:
        """Compare-and-set on ``env.version``; EnvironmentNotFound or VersionConflict."""
        stored, doc = _prepare(env, Environment, env.version + 1)
        missing = EnvironmentNotFound(f"no environment named {stored.name!r}", name=stored.name)
        self._compare_and_set(self._ref("environments", stored.name),
                              _fields(stored, doc, name=stored.name), env.version, missing,
                              "update an environment")  # fmt: skip
        return stored

    def delete_environment(self, name: str) -> None:
        """Idempotent."""
        ref = self._ref("environments", name)
        with self._translated("delete an environment"):
            ref.delete(**self._calls)

    # ----------------------------------------------------------------- tokens

    def create_token(self, token: Token) -> Token:
        """Insert at version 1 with its secret's lock, in one batch; AlreadyExists if the id,
        or the secret's hash, is taken."""
        stored, doc = _prepare(token, Token, 1)
        fields = _fields(stored, doc, secret_hash=stored.secret_hash,
                         created_at=utc(stored.created_at))  # fmt: skip
        writes: Writes = [(self._ref("tokens", stored.id), fields),
                          (self._ref("token_hashes", stored.secret_hash), {"token_id": stored.id})]
        self._create(writes, "create a token", lambda: AlreadyExists(
            f"token {stored.id!r} (or one with its secret) exists", id=stored.id))  # fmt: skip
        return stored

    def find_token(self, secret_hash: str) -> Token:
        """The token whose secret hashes to this; TokenNotFound if none."""
        # index: automatic single-field (secret_hash)
        query = self._col("tokens").where(filter=_filter("secret_hash", "==", secret_hash))
        found = self._query(Token, query.limit(1), "find a token")
        if not found:
            # The hash identifies a credential: keep it out of the error.
            raise TokenNotFound("no token has this secret")
        return found[0]

    def list_tokens(self) -> list[Token]:
        """Oldest first by ``created_at`` (ties by id)."""
        # index: automatic single-field (created_at)
        return self._query(Token, self._col("tokens").order_by("created_at"), "list tokens")

    def take_token(self, secret_hash: str) -> Token:
        """Read the secret's lock and the token it names, then delete both, in one
        transaction; TokenNotFound if there is no lock. Of several takers exactly one
        commits: the others' transactions run again (after a back-off when contended) and
        find no lock."""
        lock = self._ref("token_hashes", secret_hash)

        def body(tx: Transaction) -> Token:
            (owner,) = self._read(tx, lock)
            if not owner.exists:
                raise TokenNotFound("no token has this secret")  # the hash stays out of it
            ref = self._ref("tokens", owner.get("token_id"))
            (current,) = self._read(tx, ref)
            if not current.exists:
                raise TokenNotFound("no token has this secret")
            token = _load(Token, current)
            tx.delete(lock)
            tx.delete(ref)
            return token

        return self._transact_contended("take a token", body)

    def delete_token(self, token_id: str) -> None:
        """Delete the token and its secret's lock in one transaction. Idempotent."""
        ref = self._ref("tokens", token_id)
        self._delete_locked(ref, token_id, "token_hashes", "secret_hash", "token_id",
                            "delete a token")  # fmt: skip

    # ----------------------------------------------------------------- tick due-times

    def set_due(self, due: TickDue) -> TickDue:
        """Create (version 1) or move (version + 1) the due-time with ``due.key``, in one
        transaction. An upsert, not a compare-and-set: the version passed in is ignored."""
        ref = self._ref("ticks", due.key)

        def body(tx: Transaction) -> TickDue:
            (current,) = self._read(tx, ref)
            version = current.get("version") + 1 if current.exists else 1
            stored, doc = _prepare(due, TickDue, version)
            tx.set(ref, _fields(stored, doc, key=stored.key, due_at=utc(stored.due_at)))
            return stored

        # A due-time is a hint many workers move at once (a turn's watch, a session's idle
        # check): under contention, back off and run the transaction again, rather than fail
        # the request that only wanted to say "look again then".
        return self._transact_contended("set a due-time", body)

    def get_due(self, key: str) -> TickDue | None:
        """The due-time with this key, or None."""
        return self._fetch(TickDue, self._ref("ticks", key), "read a due-time")

    def list_due(self, before: datetime, limit: int = 100) -> list[TickDue]:
        """Due-times at or before ``before``, earliest first (ties by key: by document ID, so
        keys that needed escaping may sort apart), at most ``limit``."""
        if limit <= 0:
            return []
        # index: ticks.due_at single-field, declared in terraform
        query = self._col("ticks").where(filter=_filter("due_at", "<=", utc(before)))
        return self._query(TickDue, query.order_by("due_at").limit(limit), "list due-times")

    def clear_due(
        self, key: str, version: int | None = None, due_at: datetime | None = None
    ) -> bool:
        """Remove the due-time in one transaction; with ``version`` and/or ``due_at``, only if
        the stored one still has them (to the microsecond). Returns whether one was removed."""
        ref = self._ref("ticks", key)

        def body(tx: Transaction) -> bool:
            (current,) = self._read(tx, ref)
            if (
                not current.exists
                or (version is not None and current.get("version") != version)
                or (due_at is not None and micros(current.get("due_at")) != micros(due_at))
            ):
                return False
            tx.delete(ref)
            return True

        return self._transact("clear a due-time", body)

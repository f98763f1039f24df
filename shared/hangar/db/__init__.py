"""The state database port: sessions, turns, checkpoint records, environments, tokens and tick
due-times.

Contract for every backend (checked by :mod:`hangar.testing.db`):

- Every method is one atomic transaction. Updates are compare-and-set: the record passed in
  carries the ``version`` it was read at; if the stored version differs the call raises
  :class:`~hangar.errors.VersionConflict` and changes nothing. A successful create returns the
  record with version 1, a successful update with version + 1. The caller's object is not
  mutated.
- Lookups of a missing record raise the specific ``*NotFound`` error; deletes are idempotent.
- Session names are unique (:class:`~hangar.errors.NameTaken`); environment names are the
  environment's key.
- Lists are ordered as documented on each method.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, Protocol

from hangar.backends import pick
from hangar.config import Settings
from hangar.models import (
    Checkpoint,
    Environment,
    Session,
    SessionState,
    TickDue,
    Token,
    Turn,
)


SessionOrder = Literal["created", "activity"]
"""How a page of sessions is ordered: newest first by ``created_at``, or by ``last_active_at``
(the most recently active first)."""


class Db(Protocol):
    # sessions
    def create_session(self, session: Session) -> Session:
        """Insert; raises NameTaken if the name is used, AlreadyExists if the id is."""
        ...

    def get_session(self, session_id: str) -> Session: ...

    def find_session(self, name: str) -> Session:
        """The session with this name; SessionNotFound if none."""
        ...

    def list_sessions(
        self, *, states: list[SessionState] | None = None, limit: int | None = None
    ) -> list[Session]:
        """Newest first by ``created_at``, at most ``limit`` (None: every one); only the given
        states when ``states`` is set. For the control plane's own sweeps; people page."""
        ...

    def sessions_of_environment(self, name: str, limit: int) -> list[Session]:
        """Up to ``limit`` sessions made from environment ``name``, newest first."""
        ...

    def page_sessions(
        self,
        limit: int,
        after: tuple[datetime, str] | None = None,
        *,
        state: SessionState | None = None,
        prefix: str | None = None,
        order: SessionOrder = "created",
    ) -> list[Session]:
        """One page of sessions, newest first by (``created_at``, ``id``), or with ``order``
        ``"activity"`` by (``last_active_at``, ``id``), at most ``limit``, all strictly after
        the cursor ``after`` (the last session of the previous page's ``(created_at, id)``, or
        ``(last_active_at, id)`` in activity order).

        By creation, paging this way sees each session once, none twice, whatever is created
        meanwhile (new ones come before the first page). By activity, a page never repeats a
        session either: one that becomes active while the pages are read moves before the
        first page (and shows on the next read from the top), so a later page cannot hold it
        again; one not yet reached when it moved is missed by that paging.

        ``state`` keeps only the sessions in that state; ``prefix`` only those whose name
        starts with it (compared exactly: case-sensitive, character for character; None or
        ``""`` keeps every name); both together keep what both keep. The order and the cursor
        stay the same, so paging with the same filters sees each matching session once (one
        whose state changes meanwhile may come or go). Served from an index, never by reading
        every session, in either order: a prefix is the range
        ``prefix <= name < records.prefix_end(prefix)``."""
        ...

    def update_session(self, session: Session) -> Session:
        """Compare-and-set on ``session.version``. A rename to a taken name raises NameTaken."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Delete the session with its turns and checkpoint records. Idempotent."""
        ...

    # turns
    def add_turn(self, turn: Turn) -> Turn:
        """Insert turn ``n`` of its session; AlreadyExists if that number is taken."""
        ...

    def get_turn(self, session_id: str, n: int) -> Turn: ...

    def list_turns(self, session_id: str) -> list[Turn]:
        """Oldest first (by ``n``)."""
        ...

    def update_turn(self, turn: Turn) -> Turn:
        """Compare-and-set on ``turn.version``."""
        ...

    # checkpoints
    def record_checkpoint(self, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        """Insert the record and, in the same transaction, drop all but the newest ``keep`` of the
        session's checkpoints (by ``ts``). Returns the dropped records, whose blobs the caller
        deletes. AlreadyExists if the id is taken; SessionNotFound if the session does not exist
        (checked in the same transaction); InvalidInput if ``keep`` is below 1.

        When ``checkpoint.source`` is set (a format-2 checkpoint reusing another's chunks), the
        record of that checkpoint, of session ``checkpoint.source_session`` (None: the same
        session), must exist when the transaction commits: it is read in the same transaction,
        so a concurrent prune or delete of it either comes first (and this call sees it gone)
        or conflicts. If it is gone this raises SourcePruned and changes nothing. A source that
        this very call prunes is fine: the new record takes over its references at once."""
        ...

    def checkpoints_using(self, session_id: str) -> list[Checkpoint]:
        """Every checkpoint record, of any session (this one included), whose ``uses`` lists
        ``session_id``: the kept checkpoints that refer to chunks it owns. Oldest first by
        ``ts`` (ties as each backend breaks them). Deleted and pruned records are not in it.
        For the sweep of a session's chunks (archive, delete)."""
        ...

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Oldest first, newest last (by ``ts``)."""
        ...

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint: ...

    def delete_checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Drop every checkpoint record of the session; returns what was dropped."""
        ...

    # environments
    def create_environment(self, env: Environment) -> Environment:
        """AlreadyExists if the name is taken."""
        ...

    def get_environment(self, name: str) -> Environment: ...

    def list_environments(self) -> list[Environment]:
        """By name."""
        ...

    def update_environment(self, env: Environment) -> Environment: ...

    def delete_environment(self, name: str) -> None: ...

    # tokens
    def create_token(self, token: Token) -> Token: ...

    def find_token(self, secret_hash: str) -> Token:
        """The token whose secret hashes to this; TokenNotFound if none."""
        ...

    def list_tokens(self) -> list[Token]:
        """Oldest first."""
        ...

    def take_token(self, secret_hash: str) -> Token:
        """Find the token whose secret hashes to this and delete it, in one transaction, and
        return it: a single-use secret (a terminal ticket). Of several callers taking one
        token at once exactly one gets it; every other one, like any caller after it, gets
        TokenNotFound."""
        ...

    def delete_token(self, token_id: str) -> None: ...

    # tick due-times
    def set_due(self, due: TickDue) -> TickDue:
        """Create or move the due-time with this key (an upsert, not a compare-and-set: the
        version passed in is ignored). The version it returns counts the moves since the key
        was created; a key that was cleared and set again starts over at 1."""
        ...

    def get_due(self, key: str) -> TickDue | None:
        """The due-time with this key, or None if there is none (cleared, or never set)."""
        ...

    def list_due(self, before: datetime, limit: int = 100) -> list[TickDue]:
        """Due-times at or before ``before``, earliest first (ties by key), at most ``limit``."""
        ...

    def clear_due(
        self, key: str, version: int | None = None, due_at: datetime | None = None
    ) -> bool:
        """Remove a due-time. With ``version`` and/or ``due_at``, only if the stored one still
        has them (compared to the microsecond), so a clear after handling a tick never removes
        a due-time that was moved meanwhile. Pass both: versions restart at 1 after a clear, so
        a version alone can match a due-time that was cleared and set again while the tick was
        handled. Returns whether something was removed; a missing key is not an error."""
        ...

    def close(self) -> None: ...


def _open_sqlite(url: str, settings: Settings) -> Db:
    from hangar.db.sqlite import SqliteDb

    return SqliteDb.from_url(url)


def _open_firestore(url: str, settings: Settings) -> Db:
    from hangar.db.firestore import FirestoreDb

    return FirestoreDb.from_url(url)


_BACKENDS: dict[str, Callable[[str, Settings], Db]] = {
    "sqlite": _open_sqlite,
    "firestore": _open_firestore,
}


def open_db(url: str, settings: Settings) -> Db:
    """Open the backend the URL's scheme names; InvalidSettings for an unknown scheme."""
    return pick(_BACKENDS, url, "HANGAR_DB")(url, settings)

"""Session records: finding one by reference, and the compare-and-set writes every transition of
the session service goes through.

Contracts: :meth:`Records.claim` is the single gate of a transition; of two callers racing for
the same session exactly one wins and the other gets SessionBusy (InvalidState when the session
is in a state the action never applies to). :meth:`Records.update` applies changes to whatever
the record is now, retrying on a concurrent write, so it is for changes that hold whatever
happened meanwhile; it raises SessionBusy only when the record keeps changing. Every write
stamps ``updated_at``. Nothing is cached: each call reads the db.
"""

from __future__ import annotations

from hangar.db import Db
from hangar.errors import (
    HangarError,
    InvalidState,
    SessionBusy,
    SessionNotFound,
    VersionConflict,
)
from hangar.models import Session, SessionState as S, utcnow


class Records:
    """Reads and compare-and-set writes of session records over the db port."""

    def __init__(self, db: Db) -> None:
        self.db = db

    def resolve(self, ref: str) -> Session:
        """A session by id or by name; SessionNotFound naming ``ref`` otherwise."""
        if ref.startswith("ses-"):
            try:
                return self.db.get_session(ref)
            except SessionNotFound:
                pass
        try:
            return self.db.find_session(ref)
        except SessionNotFound:
            raise SessionNotFound(f"no session {ref!r}", ref=ref) from None

    def claim(
        self, session: Session, allowed: tuple[S, ...], action: str, to: S = S.STARTING
    ) -> Session:
        """Move the session to ``to`` if it is in an ``allowed`` state, compare-and-set: of two
        callers racing for it, exactly one wins and the other gets SessionBusy."""
        if session.state not in allowed:
            if session.state in (S.ACTIVE, S.STARTING, S.SUSPENDING):
                raise SessionBusy(
                    f"session {session.name} is busy ({session.state.value}); try again when "
                    "its turn has finished",
                    session=session.name,
                    state=session.state.value,
                )
            raise InvalidState(f"cannot {action} a session that is {session.state.value}",
                               session=session.name, state=session.state.value)  # fmt: skip
        try:
            return self.db.update_session(
                session.model_copy(update={"state": to, "updated_at": utcnow()})
            )
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile; it is busy",
                              session=session.name) from None  # fmt: skip

    def update(self, session_id: str, **changes: object) -> Session:
        """Apply ``changes`` to the current record, retrying on a concurrent change."""
        for _ in range(20):
            current = self.db.get_session(session_id)
            try:
                return self.db.update_session(
                    current.model_copy(update={**changes, "updated_at": utcnow()})
                )
            except VersionConflict:
                continue
        raise SessionBusy(f"session {session_id} keeps changing", session=session_id)

    def fail(self, session: Session, exc: HangarError) -> None:
        """Mark the session FAILED with the error's message (``send`` and ``open`` retry)."""
        self.update(session.id, state=S.FAILED, error=exc.message)

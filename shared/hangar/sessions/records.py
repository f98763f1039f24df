"""Session records: finding one by reference, and the writes that are not transitions.

Contracts: :meth:`Records.modify` applies a change computed from the record as it is now
(re-read and retried on a concurrent write), so it is for changes that hold whatever else
happened meanwhile and never overwrites a field from a stale read: activity, the sandbox's TTL,
one shell lease added or removed, the last checkpoint's error. It raises SessionBusy only when
the record keeps changing. Every write stamps ``updated_at``. State changes go through
:mod:`hangar.sessions.transitions`, never here. Nothing is cached: each call reads the db.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hangar.db import Db
from hangar.db.records import modify_session
from hangar.errors import SessionNotFound
from hangar.models import Session


class Records:
    """Reads and read-modify-writes of session records over the db port."""

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

    def modify(self, session_id: str, change: Callable[[Session], Mapping[str, Any] | None]) -> Session:
        """Apply ``change(current)`` (the fields to set, or None for nothing) to the record as
        it is now, retrying on a concurrent write; returns the record as written (or as read
        when there was nothing to do; :func:`hangar.db.records.modify_session`)."""
        return modify_session(self.db, session_id, change)

    def update(self, session_id: str, **changes: Any) -> Session:
        """Set fields that hold whatever happened meanwhile (see :meth:`modify`)."""
        return self.modify(session_id, lambda current: changes)

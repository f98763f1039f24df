"""What every db backend does to a record on its way in and out: times as aware UTC and as
microseconds since the epoch (the precision every backend keeps), the stored copy of a record
with its new version, the range of text a prefix is (for queries by name prefix), and a
session's read-modify-write over any backend (:func:`modify_session`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import ValidationError

from hangar.errors import InvalidInput, SessionBusy, VersionConflict
from hangar.models import Record, Session, utcnow

if TYPE_CHECKING:
    from hangar.db import Db

R = TypeVar("R", bound=Record)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_LAST_CHAR: Final = chr(0x10FFFF)
_SURROGATES: Final = (0xD800, 0xDFFF)
_RETRIES: Final = 20


def utc(ts: datetime) -> datetime:
    """Aware UTC; a naive datetime counts as UTC."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def micros(ts: datetime) -> int:
    """Microseconds since the epoch; a naive datetime counts as UTC."""
    return (utc(ts) - _EPOCH) // _MICROSECOND


def prefix_end(prefix: str) -> str | None:
    """The first string after every string that starts with ``prefix``, in code point order
    (which is UTF-8 byte order: how SQLite and Firestore compare text), so that ``prefix <= s <
    prefix_end(prefix)`` holds exactly when ``s`` starts with ``prefix``; None when no string
    comes after them all (an empty prefix, or one of U+10FFFF only: ``prefix <= s`` is the
    whole test then). Exact, unlike the usual ``prefix + "\\uf8ff"``, which misses names with
    characters above U+F8FF after the prefix."""
    kept = prefix.rstrip(_LAST_CHAR)
    if not kept:
        return None
    after = ord(kept[-1]) + 1
    if _SURROGATES[0] <= after <= _SURROGATES[1]:  # no text holds these: skip past them
        after = _SURROGATES[1] + 1
    return kept[:-1] + chr(after)


def prepare(
    record: Record, cls: type[R], version: int, *, max_bytes: int | None = None, store: str = ""
) -> tuple[R, str]:
    """The record as it will be stored, and its JSON: a new object with ``version`` and only
    ``cls``'s fields (so a SessionDetail is stored as its Session), never the caller's object.
    InvalidInput if it does not validate, or if its JSON is over ``max_bytes`` (``store``
    names the backend in that message)."""
    data = record.model_dump(include=set(cls.model_fields))
    data["version"] = version
    try:
        stored = cls.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"invalid {cls.__name__}: {exc.errors()[0]['msg']}",
                           record=cls.__name__) from None  # fmt: skip
    doc = stored.model_dump_json()
    if max_bytes is not None and (size := len(doc.encode())) > max_bytes:
        raise InvalidInput(
            f"the {cls.__name__} record is {size} bytes; {store or 'the db'} stores at most "
            f"{max_bytes} bytes per record",
            record=cls.__name__, size=size, limit=max_bytes,
        )  # fmt: skip
    return stored, doc


def modify_session(
    db: Db, session_id: str, change: Callable[[Session], Mapping[str, Any] | None]
) -> Session:
    """Apply ``change(current)`` (the fields to set, or None for nothing) to the session as it
    is now, re-read and retried on a concurrent write, stamping ``updated_at``; returns the
    record as written (or as read when there was nothing to do). SessionNotFound when it is
    gone; SessionBusy only when it keeps changing."""
    for _ in range(_RETRIES):
        current = db.get_session(session_id)
        changes = change(current)
        if not changes:
            return current
        try:
            return db.update_session(current.model_copy(update={**changes, "updated_at": utcnow()}))
        except VersionConflict:
            continue
    raise SessionBusy(f"session {session_id} keeps changing", session=session_id)

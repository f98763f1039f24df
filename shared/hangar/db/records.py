"""What every db backend does to a record on its way in and out: times as aware UTC and as
microseconds since the epoch (the precision every backend keeps), and the stored copy of a
record with its new version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar

from pydantic import ValidationError

from hangar.errors import InvalidInput
from hangar.models import Record

R = TypeVar("R", bound=Record)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def utc(ts: datetime) -> datetime:
    """Aware UTC; a naive datetime counts as UTC."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def micros(ts: datetime) -> int:
    """Microseconds since the epoch; a naive datetime counts as UTC."""
    return (utc(ts) - _EPOCH) // _MICROSECOND


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

"""A delivered steer is recorded on its turn for the transcript
(:meth:`hangar.sessions.steering.Steering.record`): with the run log's size then, a long one
sealed in blobs as other messages are, and past the cap only logged, nothing left behind."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Session, Turn
from hangar.sandboxes import ExecResult, Sandboxes
from hangar.sessions import steering
from hangar.sessions.messages import MessageStore
from hangar.sessions.steering import STEER_OPENING_CHARS, Steering
from hangar.testing.db import make_session


class LogSizes:
    """Sandboxes that answer only ``stat`` of a run log: ``size``, or failure when None."""

    def __init__(self, size: int | None) -> None:
        self.size = size
        self.asked: list[Sequence[str]] = []

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        self.asked.append(argv)
        if self.size is None:
            return ExecResult(1, b"", b"stat: no such file")
        return ExecResult(0, f"{self.size}\n".encode())


def setup(settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
          size: int | None) -> tuple[Steering, Session, MessageStore]:  # fmt: skip
    session = db.create_session(make_session("s", sandbox_id="sbx-1"))
    db.add_turn(Turn(session_id=session.id, n=1, message="go"))
    messages = MessageStore(blobs, keys)
    steer = Steering(settings, db, cast(Sandboxes, LogSizes(size)), cast(Any, None),
                     cast(Any, None), messages)  # fmt: skip
    return steer, session, messages


def test_a_steer_is_recorded_with_the_run_logs_size_and_a_long_one_is_sealed(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys
) -> None:
    steer, session, messages = setup(settings, db, blobs, keys, 1234)
    long = "use the v2 API " * 50
    steer.record(session, 1, "short")
    steer.record(session, 1, long)
    first, second = db.get_turn(session.id, 1).steers
    assert (first.message, first.message_ref, first.offset) == ("short", None, 1234)
    assert second.message_ref is not None and second.message == long[:STEER_OPENING_CHARS]
    assert messages.text(second.message, second.message_ref) == long
    assert blobs.list("") == [second.message_ref.blob]


def test_past_the_cap_a_steer_is_only_logged_and_an_unknown_log_size_places_it_at_the_end(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    steer, session, _ = setup(settings, db, blobs, keys, None)
    monkeypatch.setattr(steering, "MAX_STEERS", 2)
    caplog.set_level(logging.INFO, logger=steering.__name__)
    for n in range(3):
        steer.record(session, 1, f"steer {n} " + "x" * 600)
    kept = db.get_turn(session.id, 1).steers
    assert [s.message[:7] for s in kept] == ["steer 0", "steer 1"]
    assert {s.offset for s in kept} == {steering._END}
    assert sorted(blobs.list("")) == sorted(s.message_ref.blob for s in kept if s.message_ref)
    assert any("not recorded" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)  # fmt: skip

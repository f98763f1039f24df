"""Steers recorded on a turn take their place among its run log's events, and paging with
cursors gives each event once, in order, whatever the page size and whether the turn ran or
had ended when each page was read (:mod:`hangar.operations.transcripts`)."""

from __future__ import annotations

import json
from datetime import timedelta

from hangar.harnesses.transcript import Event, MessageEvent
from hangar.models import SteerRecord, Turn, TurnOutcome, utcnow
from hangar.operations.transcripts import _Walk, parse_cursor, read


def said(text: str) -> bytes:
    """A Claude Code line saying ``text``."""
    message = {"content": [{"type": "text", "text": text}]}
    return json.dumps({"type": "assistant", "message": message}).encode() + b"\n"


LINES = [said("one"), said("two"), b'{"type":"system"}\n', said("three")]
LOG = b"".join(LINES)
STARTS = [sum(len(line) for line in LINES[:i]) for i in range(len(LINES) + 1)]


def turn(steers: list[tuple[str, int]], finished: bool) -> Turn:
    now = utcnow()
    return Turn(session_id="s", n=1, message="go", started_at=now, harness="claude",
                finished_at=now + timedelta(seconds=2) if finished else None,
                outcome=TurnOutcome.EXITED if finished else None,
                steers=[SteerRecord(message=m, offset=o) for m, o in steers])  # fmt: skip


def walk(record: Turn, log: bytes) -> _Walk:
    head: list[Event] = [MessageEvent(role="user", text=record.message)]
    return _Walk(record, "claude", log, head=head, finished=record.finished_at is not None,
                 text=lambda steer: steer.message)  # fmt: skip


def texts(events: list[Event]) -> list[str]:
    return [("steer:" if getattr(e, "steer", False) else "") + getattr(e, "text", e.kind)
            for e in events]  # fmt: skip


def paged(record: Turn, log: bytes, limit: int, cursor: str | None = None) -> tuple[list[Event], str]:
    """Every event from ``cursor`` on, read ``limit`` at a time."""
    events: list[Event] = []
    while True:
        got, cursor, more = read(walk(record, log), parse_cursor(cursor), limit)
        events += got
        if not more:
            return events, cursor


STEERS = [("at the start", 0), ("mid line", STARTS[1] + 5), ("at a line", STARTS[2]),
          ("also there", STARTS[2]), ("after the last", STARTS[4]), ("past the log", 10**6)]


def test_a_steer_shows_before_the_first_log_line_at_or_after_its_offset() -> None:
    events, _ = paged(turn(STEERS, finished=True), LOG, 1000)
    assert texts(events) == [
        "go", "steer:at the start", "one", "two", "steer:mid line", "steer:at a line",
        "steer:also there", "three", "steer:after the last", "steer:past the log", "outcome"]
    steered = [e for e in events if isinstance(e, MessageEvent) and e.steer]
    assert [(e.role, e.context) for e in steered] == [("user", [])] * len(STEERS)


def test_pages_of_any_size_give_each_event_once_in_order() -> None:
    record = turn(STEERS, finished=True)
    whole, _ = paged(record, LOG, 1000)
    for limit in (1, 2, 3):
        assert texts(paged(record, LOG, limit)[0]) == texts(whole)


def test_a_reader_following_a_running_turn_gets_the_same_events_as_one_reading_it_after() -> None:
    steers = STEERS[:2]
    # the turn runs: its log ends in a line still being written, a steer waits at the end
    running = turn(steers + [("at the end", STARTS[3])], finished=False)
    first, cursor = paged(running, LOG[: STARTS[3] + 4], 1)
    assert texts(first) == ["go", "steer:at the start", "one", "two", "steer:mid line",
                            "steer:at the end"]  # fmt: skip
    # more lines and a steer in the line that was being written, then the turn ends
    later = steers + [("at the end", STARTS[3]), ("in the last line", STARTS[3] + 9)]
    rest, _ = paged(turn(later, finished=True), LOG, 2, cursor)
    assert texts(rest) == ["three", "steer:in the last line", "outcome"]
    whole, _ = paged(turn(later, finished=True), LOG, 1000)
    assert texts(first + rest) == texts(whole)

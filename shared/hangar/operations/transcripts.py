"""A turn's transcript, a page at a time (REST ``GET .../log?format=events``, MCP
``get_transcript``, ``session log --format events``).

A turn's events, in order: the person's message (with its context items' names) and any
message that joined the turn before it started, from the turn's record; then what each line of
its run log says (:func:`hangar.harnesses.transcript.line_events`), each steer the turn's
record keeps (``steer: true``) just before the first line starting at or after the log offset
it was delivered at; then, once the turn is over, its usage and its outcome, from the record.
While the turn runs only whole lines are read (the last one may still be written), so an event
once given never changes; a steer delivered while the log ends in a line still being written
waits for that line's end.

The cursor says where the next page starts: ``h.K`` (the K-th of the record's first events),
``lOFFSET.K`` (the K-th event of the place at byte OFFSET: the steers placed there, then the
events of the run-log line that starts there) or ``e.K`` (the K-th of the record's last
events). It stays valid for the turn's whole life and after: the stored log is the live one's
bytes. A steer is recorded just after it was delivered, with the log's size then: a reader
that paged past that point in between sees it only when it reads the turn afresh.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from hangar.errors import InvalidInput
from hangar.exchange.note import without_note
from hangar.harnesses.transcript import (
    Event,
    MessageEvent,
    OutcomeEvent,
    line_events,
    usage_event,
)
from hangar.models import SteerRecord, Turn, TurnOutcome

if TYPE_CHECKING:
    from hangar.runtime import Runtime

DEFAULT_LIMIT, MAX_LIMIT = 200, 1000
_CURSOR = re.compile(r"\A(?:([he])|l(\d{1,15}))\.(\d{1,9})\Z")


class TranscriptPage(BaseModel):
    """One page of a turn's events. Read on with ``next_cursor`` while ``more``; once ``more``
    is false and ``finished`` true, nothing more will come (while ``finished`` is false, ask
    again later with the same ``next_cursor``)."""

    turn: int
    harness: str = Field(description="the harness that ran the turn")
    finished: bool = Field(description="the turn is over")
    events: list[Event]
    next_cursor: str = Field(description="where the next page starts: pass it back as cursor")
    more: bool = Field(description="events beyond this page exist already: ask again now")


@dataclass(frozen=True)
class _At:
    """A place in the event sequence: ``section`` h (the record's first events), l (the run
    log, the line starting at ``offset``) or e (the record's last events); ``skip`` events of
    it already given."""

    section: str
    offset: int = 0
    skip: int = 0

    def __str__(self) -> str:
        where = f"l{self.offset}" if self.section == "l" else self.section
        return f"{where}.{self.skip}"


def parse_cursor(raw: str | None) -> _At:
    """A cursor as :func:`page` gave it (None or empty: the start); InvalidInput naming
    ``cursor`` otherwise."""
    if not raw:
        return _At("h")
    found = _CURSOR.match(raw)
    if found is None:
        raise InvalidInput(f"cursor is not one this endpoint gave: {raw[:40]!r}", field="cursor")
    section = found[1] or "l"
    return _At(section, int(found[2] or 0), int(found[3]))


def page(runtime: Runtime, ref: str, n: int | None, cursor: str | None = None,
         limit: int = DEFAULT_LIMIT) -> TranscriptPage:  # fmt: skip
    """Up to ``limit`` events of turn ``n`` (None: the latest) from ``cursor`` (None: the first).
    Raises what the service does for an unknown session or turn, InvalidInput for a bad cursor
    or limit. The record is read before the log, so a finished turn's log is its stored one,
    whole."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be from 1 to {MAX_LIMIT}, not {limit}", field="limit")
    at = parse_cursor(cursor)
    session = runtime.sessions.resolve(ref)
    turn = runtime.sessions.wait(session.id, n, timeout=0)
    log = runtime.sessions.log(session.id, turn.n) if turn.started_at else b""
    if at.section == "l" and at.offset > 0 and at.offset <= len(log) and log[at.offset - 1] != 10:
        raise InvalidInput("cursor is not one this endpoint gave: not at a line's start",
                           field="cursor")  # fmt: skip
    harness = turn.harness or session.harness
    walk = _Walk(turn, harness, log, head=_head(runtime, turn), finished=turn.finished_at is not None,
                 text=lambda steer: runtime.sessions.messages.text(steer.message,
                                                                   steer.message_ref))  # fmt: skip
    events, next_cursor, more = read(walk, at, limit)
    return TranscriptPage(turn=turn.n, harness=harness, finished=walk.finished, events=events,
                          next_cursor=next_cursor, more=more)  # fmt: skip


def read(walk: _Walk, at: _At, limit: int) -> tuple[list[Event], str, bool]:
    """Up to ``limit`` of ``walk``'s events from ``at``, the cursor after them, and whether
    more are there already."""
    events: list[Event] = []
    after = at
    for event, place in walk.events(at):
        if len(events) == limit:
            return events, str(after), True
        events.append(event)
        after = place
    return events, str(walk.stopped), False


def _head(runtime: Runtime, turn: Turn) -> list[Event]:
    """The person's message with its context items' names, then those that joined the turn."""
    names = [c.name or c.url or c.kind.value for c in turn.context]
    head: list[Event] = [MessageEvent(role="user", text=turn.message, context=names)]
    for queued in turn.queued:
        text = runtime.sessions.messages.text(queued.message, queued.message_ref)
        head.append(MessageEvent(role="user", text=text))
    return head


class _Walk:
    """The turn's events from a place on, each with the place after it; ``stopped`` is where
    a walk that ran out ended (past the lines that said nothing: the run log's last whole line,
    while the turn runs). ``text`` reads a recorded steer's whole message (only for the steers
    walked over)."""

    def __init__(self, turn: Turn, harness: str, log: bytes, *, head: list[Event],
                 finished: bool, text: Callable[[SteerRecord], str]) -> None:  # fmt: skip
        self.turn, self.harness, self.log, self.head = turn, harness, log, head
        self.finished, self.text = finished, text
        self.steers = sorted(turn.steers, key=lambda s: s.offset)  # stable: delivery order
        self.offsets = [s.offset for s in self.steers]
        self.stopped = _At("h")

    def events(self, at: _At) -> Iterator[tuple[Event, _At]]:
        if at.section == "h":
            for k in range(at.skip, len(self.head)):
                yield self.head[k], _At("h", 0, k + 1)
            at = _At("l")
        if at.section == "l":
            offset, skip = at.offset, at.skip
            while True:
                end = self.log.find(b"\n", offset)
                whole = end != -1 or (self.finished and offset < len(self.log))
                steers = self._steers_at(offset, last=self.finished and not whole)
                for k in range(skip, len(steers)):
                    yield self._steer(steers[k]), _At("l", offset, k + 1)
                if not whole:  # a line still being written, or none
                    self.stopped = _At("l", offset, max(skip, len(steers)))
                    break
                end = len(self.log) if end == -1 else end
                said = line_events(self.log[offset:end])
                for k in range(max(skip - len(steers), 0), len(said)):
                    yield said[k], _At("l", offset, len(steers) + k + 1)
                offset, skip = end + 1, 0
            if not self.finished:
                return
            at = _At("e")
        if not self.finished:  # a cursor past the log of a turn that runs: nothing yet
            self.stopped = at
            return
        tail = self._tail()
        for k in range(at.skip, len(tail)):
            yield tail[k], _At("e", 0, k + 1)
        self.stopped = _At("e", 0, max(at.skip, len(tail)))

    def _steers_at(self, offset: int, *, last: bool) -> list[SteerRecord]:
        """The steers placed just before the line starting at ``offset``: those delivered
        after the line before it began and at most ``offset`` into the log (``last``, the
        finished log's end: every one after the line before it began)."""
        before = -1 if offset == 0 else self.log.rfind(b"\n", 0, offset - 1) + 1
        start = bisect_right(self.offsets, before)
        stop = len(self.steers) if last else bisect_right(self.offsets, offset)
        return self.steers[start:stop]

    def _steer(self, steer: SteerRecord) -> MessageEvent:
        return MessageEvent(role="user", text=self.text(steer), steer=True)

    def _tail(self) -> list[Event]:
        """The finished turn's usage (its repair run's included) and outcome."""
        turn = self.turn
        usage = dict(turn.usage)
        for key, value in turn.repair_usage.items():
            usage[key] = usage.get(key, 0) + value
        tail: list[Event] = []
        used = usage_event(usage, self.harness)
        if used is not None:
            tail.append(used)
        seconds = None
        if turn.started_at is not None and turn.finished_at is not None:
            seconds = round((turn.finished_at - turn.started_at).total_seconds(), 3)
        outcome = turn.outcome or TurnOutcome.FAILED
        tail.append(OutcomeEvent(outcome=outcome.value, reason=reason(turn),
                                 duration_seconds=seconds))  # fmt: skip
        return tail


def reason(turn: Turn) -> str | None:
    """Why the finished turn ended as it did, in words (None: it did what was asked); never
    hangar's note to the agent."""
    outcome = turn.outcome
    summary = without_note(turn.summary or "").strip()
    if outcome is TurnOutcome.EXITED:
        return f"no valid result: {turn.result_error}" if turn.result_error else None
    if outcome is TurnOutcome.NEEDS_INPUT:
        return f"the agent asks: {turn.question}" if turn.question else "the agent asks"
    if outcome is TurnOutcome.INTERRUPTED:
        return "stopped on request"
    if outcome is TurnOutcome.TIMED_OUT:
        return summary or "it ran past its time limit"
    return summary or "the turn failed, and said no more"

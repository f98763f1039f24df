"""Following one turn for a caller that shows progress (MCP's ``wait_for_turn``): each look
says what happened since the last one, as short notes.

The notes, in order: the start-up phases while the session starts; each line the agent adds to
``out/progress.jsonl`` (with its pct); and, while it adds none for :data:`QUIET_SECONDS`, the
latest run-log event (a tool call, the assistant's text, a model API retry); and, when there is
nothing new for that long (a silent command, a slow model response, a long setup), the last
note again, so that a client which drops a call that sends no progress (Claude Code gives up on
an HTTP MCP tool after 300 s) keeps waiting. A look also finishes the turn when its run has
ended, as every wait does. Nothing is kept between calls but the cursors in this object: a
caller that comes back makes a new one and catches up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hangar.errors import SandboxError, SandboxNotFound
from hangar.exchange.progress import ProgressLine, progress_file, read_progress
from hangar.harnesses.events import describe_event
from hangar.models import Session, SessionState as S, Turn
from hangar.processes.following import RunFollowers
from hangar.redact import redact
from hangar.sandboxes import Sandboxes
from hangar.sessions.turns import Turns

QUIET_SECONDS = 5.0
_PAST_THE_END = 1 << 62  # a cursor past any log: asks a follower for its cursor alone
_UNSEEN = object()  # the progress file's stamp before the first look
MAX_LOG_READ = 256 << 10


@dataclass(frozen=True)
class Note:
    message: str
    pct: float | None = None


@dataclass(frozen=True)
class Look:
    """What one look saw: the new notes, the turn and session as they are, and whether the
    turn is over (finished, checkpointed, the session no longer ACTIVE)."""

    notes: list[Note]
    turn: Turn
    session: Session
    done: bool


class TurnWatch:
    """Looks at turn ``n`` (None: the latest) of session ``ref``."""

    def __init__(self, turns: Turns, sandboxes: Sandboxes, ref: str, n: int | None = None,
                 *, quiet: float = QUIET_SECONDS) -> None:  # fmt: skip
        self.turns = turns
        self.sandboxes = sandboxes
        self.ref = ref
        self.n = n
        self.quiet = quiet
        self._phase: tuple[str, str] | None = None
        self._progress = 0
        self._watched: str | None | object = _UNSEEN
        self._log = 0
        self._last_note = time.monotonic()
        self._said: Note | None = None
        self._started = False
        self._flushed = False

    def look(self) -> Look:
        turn = self.turns.wait(self.ref, self.n, timeout=0)
        self.n = turn.n
        session = self.turns.records.resolve(self.ref)
        notes: list[Note] = []
        if session.state is S.STARTING and session.phase is not None:
            key = (session.phase.step.value, session.phase.detail)
            if key != self._phase:
                self._phase = key
                notes.append(Note(session.phase.describe()))
        running = turn.started_at is not None and turn.finished_at is None
        if running and session.sandbox_id and session.state is S.ACTIVE:
            if not self._started:
                self._started = True
                notes.append(Note(f"turn {turn.n} is running"))
            notes += self._agent_notes(session, turn)
        elif turn.finished_at is not None and not self._flushed and session.sandbox_id:
            self._flushed = True  # the progress lines it wrote since the last look
            notes += self._agent_notes(session, turn, events=False)
        done = turn.finished_at is not None and session.state is not S.ACTIVE
        if not notes and not done and time.monotonic() - self._last_note >= self.quiet:
            notes.append(self._said or Note(f"waiting for turn {turn.n}"))
        if notes:
            self._said = notes[-1]
            self._last_note = time.monotonic()
        return Look(notes, turn, session, done)

    def _agent_notes(self, session: Session, turn: Turn, *, events: bool = True) -> list[Note]:
        assert session.sandbox_id is not None
        try:
            status = self.turns.followers.wait(session.sandbox_id, turn.active_run_id,
                                               self._log, 0, watch=progress_file(session))
            lines: list[ProgressLine] = []
            if not events or status.watched != self._watched:  # read only what changed
                lines, self._progress = read_progress(self.sandboxes, session, self._progress)
                self._watched = status.watched
        except (SandboxError, SandboxNotFound):
            return []  # the sandbox went away: the next look sees the turn's end
        self._log = status.cursor
        if lines:
            return [Note(p.message, p.pct) for p in lines]
        if not events or time.monotonic() - self._last_note < self.quiet:
            return []
        said = [e for e in map(describe_event, status.data[-MAX_LOG_READ:].splitlines()) if e]
        return [Note(said[-1])] if said else []


def latest_progress(followers: RunFollowers, session: Session, turn: Turn) -> str | None:
    """What the running ``turn``'s newest described run-log line says
    (:func:`~hangar.harnesses.events.describe_event`), redacted: the session's ``progress``
    while the turn runs. None when no line of its last :data:`MAX_LOG_READ` bytes says
    anything. Reads this process's follower of the run (no call into the sandbox when it is
    fresh); only whole lines count (the last one may be half written). Raises what the
    follower raises (SandboxNotFound, SandboxError)."""
    assert session.sandbox_id is not None
    run = turn.active_run_id
    end = followers.since(session.sandbox_id, run, _PAST_THE_END).cursor
    start = max(0, end - MAX_LOG_READ)
    data = followers.since(session.sandbox_id, run, start).data
    lines = data[: data.rfind(b"\n") + 1].splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # begun before the bytes read
    for line in reversed(lines):
        if said := describe_event(line):
            return redact(said)
    return None

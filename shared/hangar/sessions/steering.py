"""Steering and interrupting a live turn (spec 002, "How steering works"): a command signed with
the turn's key (:mod:`hangar.agent.commands`), given the turn's next ``seq`` by a
compare-and-set on the turn's record, landed in the run's control folder
(:mod:`hangar.processes.control`) and answered by the driver in the sandbox.

Nothing here holds state between calls: the key is on the turn's record (wrapped), the next
``seq`` too, and the answers are in the sandbox; a restarted control plane steers the same run.
A command that did not land (the driver had closed its inbox: the turn is over) changed
nothing, and is :class:`~hangar.errors.TurnEnded`; one the driver answers ``turn_ended`` (the
agent's process ended before it could be passed on) likewise.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from hangar.config import Settings
from hangar.db import Db
from hangar.harnesses import get_harness
from hangar.errors import CommandRefused, InvalidInput, InvalidState, NotFound, SandboxError
from hangar.errors import SessionBusy, SessionNotFound, TurnEnded, VersionConflict
from hangar.models import QueuedMessage, Session, SessionState as S, SteerRecord, Turn, utcnow
from hangar.processes import control, run_dir
from hangar.sandboxes import Sandboxes, SandboxUser
from hangar.sessions.messages import Kept, MessageStore
from hangar.sessions.transitions import Transitions
from hangar.sessions.turns import Turns

logger = logging.getLogger(__name__)

MAX_QUEUED = 8
"""Messages that may wait for a turn that is starting (each up to 64 KiB on its record)."""
START_SECONDS = 120.0
"""How long a message for a turn whose run is being started waits for it to begin."""
MAX_STEERS = 200
"""Steers a turn's record keeps for its transcript; later ones are delivered, not recorded."""
STEER_INLINE_BYTES = 512
"""A recorded steer longer than this (UTF-8) is sealed in blobs, so that :data:`MAX_STEERS` of
them keep a turn's record small; the record then keeps its first :data:`STEER_OPENING_CHARS`."""
STEER_OPENING_CHARS = 120
_END = 1 << 62
"""A steer's offset when the sandbox did not say its log's size: the transcript shows it at
the turn's end."""
ANSWER_SECONDS = 20.0
"""How long a steer or an interrupt waits for the driver's answer (it looks every twentieth of a
second; a CLI busy writing its output may take longer to be read)."""


@dataclass(frozen=True)
class Delivered:
    """A command the driver passed on to the agent's CLI: its turn and ``seq``."""

    turn: int
    seq: int


class Steering:
    """Commands to a session's live turn over the db and the sandboxes."""

    def __init__(self, settings: Settings, db: Db, sandboxes: Sandboxes, turns: Turns,
                 transitions: Transitions, messages: MessageStore,
                 poll: float = 0.1) -> None:  # fmt: skip
        self.settings, self.db, self.sandboxes, self.poll = settings, db, sandboxes, poll
        self.turns, self.transitions, self.messages = turns, transitions, messages

    def join(self, session: Session, n: int, message: str) -> Delivered:
        """``message`` for turn ``n``, which the session is starting: queued on the turn
        (its prompt carries it after its own message, in order) while the turn's command key
        is not set, else steered once its run has begun. SessionBusy when the turn cannot be
        live (a one-shot harness, live turns off) or :data:`MAX_QUEUED` wait already;
        TurnEnded when the turn ended (it failed to start) before the message reached it."""
        harness = get_harness(session.harness)
        if not (self.settings.live_turns and harness.can_steer):
            raise SessionBusy(f"session {session.name} is busy starting a turn that cannot be "
                              "steered; wait for it", session=session.name)  # fmt: skip
        kept: Kept | None = None
        try:
            while True:
                turn = self.db.get_turn(session.id, n)
                if turn.finished_at is not None:
                    raise TurnEnded(f"turn {n} of {session.name} ended before it began",
                                    session=session.name, turn=n)  # fmt: skip
                if turn.command_key is not None:
                    break
                if len(turn.queued) >= MAX_QUEUED:
                    raise SessionBusy(f"{MAX_QUEUED} messages wait for turn {n} of "
                                      f"{session.name} already", session=session.name)  # fmt: skip
                kept = kept or self.messages.keep(session.id, n, message)
                queued = QueuedMessage(message=kept.message, message_ref=kept.ref)
                try:
                    self.db.update_turn(turn.model_copy(update={"queued": [*turn.queued,
                                                                           queued]}))  # fmt: skip
                    kept = None  # the record names it now
                    return Delivered(n, 0)
                except VersionConflict:
                    continue  # written meanwhile: look again
        finally:
            if kept is not None:
                self.messages.release(kept)
        deadline = time.monotonic() + START_SECONDS
        while turn.started_at is None:  # its run is being started: steer it once it runs
            if time.monotonic() > deadline or turn.finished_at is not None:
                raise TurnEnded(f"turn {n} of {session.name} did not begin", session=session.name,
                                turn=n)  # fmt: skip
            time.sleep(self.poll)
            turn = self.db.get_turn(session.id, n)
        key = self.turns.command_key(turn)
        assert key is not None
        return self.steer(self.db.get_session(session.id), turn, key, message)

    def running(self, session: Session) -> Turn | None:
        """The session's running live turn, from the records alone; None when no turn runs,
        or the one that runs is one-shot (or its repair run is what runs now)."""
        if session.state is not S.ACTIVE or session.sandbox_id is None:
            return None
        try:
            turn = self.turns.turn(session.id, None)
        except NotFound:
            return None
        live = turn.command_key is not None and turn.finished_at is None
        return turn if live and turn.active_run_id == turn.run_id else None

    def live_turn(self, session: Session) -> tuple[Turn, bytes] | None:
        """:meth:`running`'s turn and its key (unwrapped: a call to the keys port)."""
        turn = self.running(session)
        key = None if turn is None else self.turns.command_key(turn)
        return None if turn is None or key is None else (turn, key)

    def ending(self, session: Session) -> bool:
        """Whether the session's latest turn is a live one that has ended and is being
        finished (the session still ACTIVE): a steer then waits for it and starts the next."""
        if session.state is not S.ACTIVE:
            return False
        try:
            turn = self.turns.turn(session.id, None)
        except NotFound:
            return False
        return turn.command_key is not None and turn.finished_at is not None

    def steer(self, session: Session, turn: Turn, key: bytes, message: str) -> Delivered:
        """``message`` to the running turn, which carries it on (:meth:`command`); once
        delivered, recorded on the turn for its transcript (:meth:`record`) and the session's
        activity noted. A steer that is refused or not answered is not recorded."""
        delivered = self.command(session, turn, key, "steer", {"message": message})
        self.record(session, delivered.turn, message)
        self.touch(session)
        return delivered

    def record(self, session: Session, n: int, message: str) -> None:
        """Add the delivered ``message`` to turn ``n``'s ``steers`` (compare-and-set), with the
        run log's size now. Past :data:`MAX_STEERS` it is only logged. Best effort: the steer
        was delivered either way, so a sandbox that does not say its log's size places it at
        the turn's end, and a turn gone or a record that would grow too large is left as it
        is (logged)."""
        assert session.sandbox_id is not None
        kept: Kept | None = None
        try:
            turn = self.db.get_turn(session.id, n)
            offset = _END
            with contextlib.suppress(SandboxError, NotFound):
                size = self.sandboxes.exec(session.sandbox_id, ["stat", "-c", "%s",
                                           f"{run_dir(turn.run_id)}/log"], user=SandboxUser.HANGAR)
                if size.ok and size.stdout.strip().isdigit():
                    offset = int(size.stdout.strip())
            while len(turn.steers) < MAX_STEERS:
                kept = kept or self.messages.keep(session.id, n, message,
                                                  inline=STEER_INLINE_BYTES,
                                                  opening=STEER_OPENING_CHARS)  # fmt: skip
                steer = SteerRecord(message=kept.message, message_ref=kept.ref, offset=offset)
                try:
                    self.db.update_turn(turn.model_copy(update={"steers": [*turn.steers, steer]}))
                    kept = None  # the record names it now
                    return
                except VersionConflict:
                    turn = self.db.get_turn(session.id, n)  # written meanwhile: look again
            logger.info("turn %s of session %s: a steer delivered, not recorded (%d kept)",
                        n, session.id, MAX_STEERS)  # fmt: skip
        except NotFound:
            pass  # the turn's record is gone (its session deleted)
        except InvalidInput as exc:  # the record would outgrow the db's limit
            logger.warning("turn %s of session %s: a steer delivered, not recorded: %s",
                           n, session.id, exc)  # fmt: skip
        finally:
            if kept is not None:
                self.messages.release(kept)

    def interrupt(self, session: Session, turn: Turn, key: bytes) -> Delivered:
        """Ask the running turn's agent to stop (:meth:`command`): the turn ends
        ``interrupted``, the conversation kept as the CLI left it."""
        delivered = self.command(session, turn, key, "interrupt", {})
        self.touch(session)
        return delivered

    def touch(self, session: Session) -> None:
        """Note the session's activity (best effort: a session written meanwhile is left as
        it is; it is active either way)."""
        with contextlib.suppress(SessionBusy, InvalidState, SessionNotFound):
            self.transitions.extend(self.db.get_session(session.id), last_active_at=utcnow())

    def command(self, session: Session, turn: Turn, key: bytes, kind: control.Kind,
                body: dict[str, Any]) -> Delivered:  # fmt: skip
        """Send ``kind`` to ``turn``'s driver and wait for its answer: Delivered, or
        TurnEnded (nothing changed), CommandRefused, SandboxError (the sandbox did not
        answer in time: the command may still be carried out)."""
        assert session.sandbox_id is not None
        turn = self._next_seq(turn)
        command_id = control.land(self.sandboxes, session.sandbox_id, turn.run_id, key,
                                  turn.commands_sent, kind, body)  # fmt: skip
        deadline = time.monotonic() + ANSWER_SECONDS
        pause = self.poll / 8  # the driver looks every 0.05 s: look soon, then less often
        while True:
            answers, _ = control.answers(self.sandboxes, session.sandbox_id, turn.run_id, key)
            mine = [a for a in answers if a.id == command_id]
            if mine:
                answer = mine[0]  # the first answer to an id is the one that counts
                if answer.status == "delivered":
                    return Delivered(turn.n, turn.commands_sent)
                if answer.status == "turn_ended":
                    raise TurnEnded(f"turn {turn.n} of {session.name} ended before the "
                                    f"{kind} reached the agent", session=session.name,
                                    turn=turn.n)  # fmt: skip
                raise CommandRefused(f"the {kind} was refused: {answer.detail}",
                                     session=session.name, turn=turn.n)  # fmt: skip
            if time.monotonic() > deadline:
                raise SandboxError(f"the {kind} to turn {turn.n} of {session.name} was not "
                                   f"answered within {ANSWER_SECONDS:g} s",
                                   session=session.name, turn=turn.n)  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, self.poll)

    def _next_seq(self, turn: Turn) -> Turn:
        """The turn with its next ``seq`` given out (compare-and-set: two callers never get
        the same one)."""
        while True:
            try:
                return self.db.update_turn(turn.model_copy(
                    update={"commands_sent": turn.commands_sent + 1}))  # fmt: skip
            except VersionConflict:
                turn = self.db.get_turn(turn.session_id, turn.n)

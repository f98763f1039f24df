"""A session's turns: starting one detached in the session's sandbox, catching up with it and
finishing it, waiting for it, and its run log.

A turn never runs inside a call: it runs detached (:mod:`hangar.harnesses.runs`) and whoever
looks next (``wait``, a watch tick, ``get``) calls :meth:`Turns.catch_up`, which reads the run
and, once it has ended, finishes the turn: outcome, sealed run log, ``turn`` checkpoint, IDLE,
idle and interval ticks.

Contracts: :meth:`Turns.catch_up` is safe to call from anywhere at any time and is idempotent:
the compare-and-set on the turn record picks the one caller that finishes a turn, and a caller
that loses gets the session as it is now. :meth:`Turns.run` expects the session claimed
(STARTING); it raises the HangarError that stopped the start after recording it (the session
FAILED when no sandbox could be made; the turn FAILED and the session IDLE when the harness
could not start). A failed ``turn`` checkpoint does not fail the turn: it is the session's
``error``. Run logs are sealed under a fresh data key at ``sessions/<session>/turns/<n>/log``,
at most MAX_LOG_BYTES of them.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    CheckpointError,
    HangarError,
    NotFound,
    SandboxError,
    SandboxNotFound,
    VersionConflict,
)
from hangar.harnesses import Harness, TurnSpec, get_harness
from hangar.harnesses.handoff import TurnRecord, handoff_prompt
from hangar.harnesses.runs import read_run
from hangar.harnesses.turns import start_turn, turn_result
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import CheckpointReason, Session, SessionState as S, Turn, TurnOutcome, utcnow
from hangar.sandboxes import Sandboxes
from hangar.sessions.checkpoints import Checkpointer
from hangar.sessions.environments import Environments
from hangar.sessions.housekeeping import Housekeeping
from hangar.sessions.records import Records
from hangar.sessions.sandbox import Provisioner, take_checkpoint
from hangar.sessions.workspace import repo_dir_for

logger = logging.getLogger(__name__)

MAX_LOG_BYTES = 50 << 20


def run_log_key(session_id: str, n: int) -> str:
    """Where turn ``n``'s sealed run log is stored (also its associated data)."""
    return f"sessions/{session_id}/turns/{n}/log"


class Turns:
    """Starts, finishes, waits for and reads the logs of a session's turns."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        blobs: Blobs,
        keys: Keys,
        sandboxes: Sandboxes,
        environments: Environments,
        checkpointer: Checkpointer,
        records: Records,
        provisioner: Provisioner,
        housekeeping: Housekeeping,
    ) -> None:
        self.settings = settings
        self.db = db
        self.blobs = blobs
        self.keys = keys
        self.sandboxes = sandboxes
        self.environments = environments
        self.checkpointer = checkpointer
        self.records = records
        self.provisioner = provisioner
        self.housekeeping = housekeeping

    # -- starting ---------------------------------------------------------------------------

    def run(self, session: Session, message: str) -> Turn:
        """With the session claimed (STARTING), get a sandbox and start the turn detached."""
        try:
            session = self.provisioner.ensure(session)
        except HangarError as exc:
            self.records.fail(session, exc)
            raise
        harness = get_harness(session.harness)
        turns = self.db.list_turns(session.id)
        prompt, handoff = message, False
        if session.fork_from and not session.harness_session and not harness.can_fork:
            prompt, handoff = self._handoff(session, turns, message), True
        resuming = bool(session.harness_session)
        chosen = None if resuming else str(uuid.uuid4())
        turn = self.db.add_turn(
            Turn(
                session_id=session.id,
                n=len(turns) + 1,
                message=message,
                harness_session=session.harness_session if resuming else chosen,
                handoff=handoff,
            )
        )
        spec = self._spec(session, turn, harness, prompt)
        try:
            assert session.sandbox_id is not None
            start_turn(self.sandboxes, session.sandbox_id, harness, spec, turn.run_id)
        except HangarError as exc:
            self.db.update_turn(
                turn.model_copy(
                    update={
                        "finished_at": utcnow(),
                        "outcome": TurnOutcome.FAILED,
                        "error_code": exc.code,
                        "summary": exc.message,
                    }
                )
            )
            idle = self.records.update(session.id, state=S.IDLE, error=exc.message)
            self.housekeeping.schedule_housekeeping(idle)  # its sandbox still idles and expires
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        self.records.update(
            session.id,
            state=S.ACTIVE,
            needs_input=None,
            error=None,
            last_active_at=utcnow(),
            sandbox_expires_at=utcnow() + ttl,
        )
        self.housekeeping.schedule_watch(session.id)
        return turn

    def _spec(self, session: Session, turn: Turn, harness: Harness, prompt: str) -> TurnSpec:
        env = self.environments.require(session.environment)
        resuming = bool(session.harness_session)
        return TurnSpec(
            prompt=prompt,
            cwd=repo_dir_for(session.repo or ""),
            model=session.model,
            conversation_id=session.harness_session if resuming else None,
            fork_from=session.fork_from if not resuming and harness.can_fork else None,
            new_id=None if resuming else turn.harness_session,
            env=self.environments.turn_env(env),
        )

    def _handoff(self, session: Session, turns: list[Turn], message: str) -> str:
        history: list[Turn] = turns
        if session.fork_from and not turns:
            source = self._fork_source(session)
            history = self.db.list_turns(source.id) if source else []
        records = [TurnRecord(t.message, t.summary) for t in history]
        return handoff_prompt(message, records, branch=session.branch)

    def _fork_source(self, session: Session) -> Session | None:
        for candidate in self.db.list_sessions():
            if candidate.harness_session == session.fork_from and candidate.id != session.id:
                return candidate
        return None

    # -- waiting and finishing --------------------------------------------------------------

    def wait(
        self,
        ref: str,
        n: int | None = None,
        *,
        timeout: float = 600,
        on_output: Callable[[bytes], None] | None = None,
        poll: float = 0.5,
    ) -> Turn:
        """Wait for turn ``n`` (default: the latest) to finish, feeding new run-log bytes to
        ``on_output`` as they come; returns the turn, unfinished if ``timeout`` passed first."""
        session = self.records.resolve(ref)
        deadline = time.monotonic() + timeout
        cursor = 0
        while True:
            session = self.catch_up(self.db.get_session(session.id))
            turn = self.turn(session.id, n)
            if on_output is not None and not turn.finished_at and session.sandbox_id:
                try:
                    status = read_run(self.sandboxes, session.sandbox_id, turn.run_id, cursor)
                except (SandboxError, SandboxNotFound):
                    status = None
                if status is not None and status.data:
                    cursor = status.cursor
                    on_output(status.data)
            if turn.finished_at or time.monotonic() >= deadline:
                return turn
            time.sleep(poll)

    def turn(self, session_id: str, n: int | None) -> Turn:
        """Turn ``n`` of the session (None: the latest); NotFound when it has no turns."""
        turns = self.db.list_turns(session_id)
        if not turns:
            raise NotFound(f"session {session_id} has no turns", session_id=session_id)
        if n is None:
            return turns[-1]
        return self.db.get_turn(session_id, n)

    def catch_up(self, session: Session) -> Session:
        """If the session's turn has ended, finish it: outcome, stored log, checkpoint, IDLE.
        Safe to call from anywhere at any time; the turn's compare-and-set picks one finisher."""
        if session.state is not S.ACTIVE or not session.sandbox_id:
            return session
        turns = self.db.list_turns(session.id)
        if not turns:
            return session
        turn = turns[-1]
        if turn.finished_at is None:
            try:
                # The status alone first: the whole log is read once, when the run has ended.
                status = read_run(self.sandboxes, session.sandbox_id, turn.run_id, 0, 0)
                if status.finished:
                    status = read_run(self.sandboxes, session.sandbox_id, turn.run_id, 0,
                                      MAX_LOG_BYTES)  # fmt: skip
            except SandboxNotFound:
                return self._sandbox_lost(session.id, session.sandbox_id)
            except SandboxError:
                status = None
            if status is None or not status.finished:
                return session
            assert status.exit_code is not None
            finished = self._finish_turn(session, turn, status.data, status.exit_code)
            if finished is None:
                return self.db.get_session(session.id)
            turn = finished
        return self._after_turn(session, turn)

    def _sandbox_lost(self, session_id: str, sandbox_id: str) -> Session:
        """The sandbox of an ACTIVE session is gone. Usually its pre-destroy hook already made
        the session SUSPENDED; if the record still points at the sandbox, no hook ran (a host
        restart, a killed init) and the session would wait for a turn that can never end. Then
        the running turn is INTERRUPTED and the session SUSPENDED, to resume from its last
        checkpoint (what the turn did since is lost with the sandbox). Compare-and-set: anyone
        who changed the session meanwhile wins, and their state is returned."""
        session = self.db.get_session(session_id)
        if session.state is not S.ACTIVE or session.sandbox_id != sandbox_id:
            return session
        logger.warning("sandbox %s of session %s is gone without a checkpoint; suspending it",
                       sandbox_id, session_id)  # fmt: skip
        for turn in self.db.list_turns(session_id):
            if turn.finished_at is None:
                try:
                    self.db.update_turn(turn.model_copy(update={
                        "finished_at": utcnow(), "outcome": TurnOutcome.INTERRUPTED,
                        "summary": "the sandbox was lost during the turn; the session resumes "
                                   "from its last checkpoint"}))  # fmt: skip
                except VersionConflict:
                    pass  # someone else finished it
        lost = session.model_copy(update={
            "state": S.SUSPENDED, "sandbox_id": None, "sandbox_expires_at": None,
            "updated_at": utcnow()})  # fmt: skip
        try:
            return self.db.update_session(lost)
        except VersionConflict:
            return self.db.get_session(session_id)

    def _finish_turn(self, session: Session, turn: Turn, log: bytes, exit_code: int) -> Turn | None:
        harness = get_harness(session.harness)
        assert session.sandbox_id is not None
        spec = self._spec(session, turn, harness, turn.message)
        result = turn_result(self.sandboxes, session.sandbox_id, harness, spec, turn.run_id, log,
                             exit_code)  # fmt: skip
        log_key = self._store_log(session.id, turn.n, log)
        outcome = TurnOutcome.EXITED if result.ok else TurnOutcome.FAILED
        if exit_code == 130:
            outcome = TurnOutcome.INTERRUPTED
        finished = turn.model_copy(
            update={
                "finished_at": utcnow(),
                "exit_code": exit_code,
                "outcome": outcome,
                "summary": result.summary if result.ok else (result.error.message if result.error else None),
                "usage": result.usage,
                "harness_session": result.conversation_id or turn.harness_session,
                "error_code": result.error.code if result.error else None,
                "log_key": log_key,
                "log_cursor": len(log),
            }
        )
        try:
            return self.db.update_turn(finished)
        except VersionConflict:
            return None  # another caller finished it

    def _after_turn(self, session: Session, turn: Turn) -> Session:
        """The session side of a finished turn: checkpoint, then IDLE with the conversation."""
        if self.db.get_session(session.id).state is not S.ACTIVE:
            return self.db.get_session(session.id)
        ok = turn.outcome is TurnOutcome.EXITED
        try:
            take_checkpoint(self.checkpointer, self.records, session, CheckpointReason.TURN)
            error = None if ok else turn.summary
        except CheckpointError as exc:
            logger.error("checkpoint after turn %d of %s failed: %s", turn.n, session.id, exc)
            error = f"checkpoint after turn {turn.n} failed: {exc.message}"
        changes: dict[str, object] = {
            "state": S.IDLE,
            "last_active_at": utcnow(),
            "error": error,
        }
        if ok and turn.harness_session:
            changes.update(harness_session=turn.harness_session, fork_from=None)
        current = self.db.get_session(session.id)
        if current.state is not S.ACTIVE:
            return current  # settled meanwhile (another finisher, the pre-destroy hook)
        changes["updated_at"] = utcnow()
        try:
            updated = self.db.update_session(current.model_copy(update=changes))
        except VersionConflict:
            return self.db.get_session(session.id)
        self.housekeeping.cancel_watch(session.id)
        self.housekeeping.schedule_housekeeping(updated)
        return updated

    # -- run logs ---------------------------------------------------------------------------

    def _store_log(self, session_id: str, n: int, log: bytes) -> str:
        data_key = new_data_key()
        aad = run_log_key(session_id, n).encode()
        self.blobs.put(run_log_key(session_id, n), seal(data_key, aad, [log[:MAX_LOG_BYTES]]))
        return base64.b64encode(self.keys.wrap(data_key)).decode()

    def log(self, ref: str, n: int | None = None) -> bytes:
        """A turn's run log (default: the latest turn): live while it runs, stored after."""
        session = self.records.resolve(ref)
        turn = self.turn(session.id, n)
        if turn.log_key:
            data_key = self.keys.unwrap(base64.b64decode(turn.log_key))
            aad = run_log_key(session.id, turn.n).encode()
            with self.blobs.open(run_log_key(session.id, turn.n)) as stream:
                return b"".join(unseal(data_key, aad, stream))
        if session.sandbox_id:
            try:
                return read_run(self.sandboxes, session.sandbox_id, turn.run_id, 0, MAX_LOG_BYTES).data
            except (SandboxError, SandboxNotFound):
                pass
        return b""

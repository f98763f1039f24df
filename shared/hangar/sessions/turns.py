"""A session's turns: starting one's harness detached in the session's sandbox (the last step of
a start), finishing it once it has ended, waiting for it, and its run log.

A turn never runs inside a call: it runs detached (:mod:`hangar.processes.runs`). Its record
exists from the request that asked for it (``started_at`` empty until the harness starts). Who
finishes it: the watch tick, or ``wait`` (never a read). Finishing is claimed on the session
first (:meth:`~hangar.sessions.transitions.Transitions.claim_finish`), so exactly one caller
records the outcome, takes the turn's one ``turn`` checkpoint and moves the session to IDLE; a
finisher that dies leaves an expired claim that the claim tick takes over.

Before the turn starts, ``$HANGAR_IO`` is readied and the prompt ends with a note on it
(:mod:`hangar.exchange.layout`), and the context that came with the message is put in place
(:mod:`hangar.exchange.intake`: files in ``in/<turn>/``, a bundle and a patch in the repo; a
refusal fails the turn as ``context_rejected``); once its run has ended, what it handed back is recorded
(:mod:`.handbacks`). A turn whose result needs repair gets one repair run in the same
conversation before it is finished: the finish claim is let go while it runs (the session stays
ACTIVE, the watch follows the repair run, its timeout stops it), and the next finish records it.

A failed ``turn`` checkpoint does not fail the turn: it is the session's ``checkpoint_error``.
A finish that fails otherwise (anything raised, or its worker dying) is tried again when its
claim's lease runs out, at most :data:`MAX_FINISH_TRIES` times in all; then the turn is FAILED
with the reason (its end already recorded: the session's ``error`` says it) and the session
IDLE, its sandbox kept, so that no finish can hold a session ACTIVE for good.
Run logs are sealed under a fresh data key at ``sessions/<session>/turns/<n>/log``, at most
MAX_LOG_BYTES of them.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from hangar.agent import commands
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    AlreadyExists,
    CheckpointError,
    HangarError,
    InvalidInput,
    NotFound,
    SandboxError,
    SandboxNotFound,
    SessionBusy,
    VersionConflict,
)
from hangar.exchange import intake, layout
from hangar.exchange.context import ContextStore
from hangar.exchange.progress import progress_file
from hangar.harnesses import Harness, Invocation, TurnSpec, get_harness
from hangar.processes.following import RunFollowers
from hangar.processes.runs import INTERRUPTED_EXIT, RunStatus, read_run, run_started, stop_run
from hangar.harnesses.turns import conversation_saved, start_turn, turn_result, write_home_files
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import CheckpointReason, Session, SessionState as S, Turn
from hangar.models import PermissionMode, TurnOutcome
from hangar.models import utcnow
from hangar.sandboxes import Sandboxes
from hangar.sessions import conversations, timeouts
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.environments import Environments
from hangar.sessions.handbacks import HandBacks, repair_prompt
from hangar.sessions.messages import MessageStore
from hangar.sessions.records import Records
from hangar.sessions.sandbox import renew_lease, take_checkpoint
from hangar.sessions.schedule import Schedule
from hangar.sessions.steps import Steps
from hangar.sessions.transitions import Transitions
from hangar.sessions.workspace import repo_dir_for

logger = logging.getLogger(__name__)

MAX_LOG_BYTES = 50 << 20
LOOK_SECONDS = 5.0
"""Seconds a wait follows a running turn before it reads the turn's record again."""
STOP_SEEN = 10.0
"""Seconds the watch waits to see a run it stopped end (the stop itself waits up to 5)."""
MAX_FINISH_TRIES = 3
"""Tries at a turn's finish (the first, then one per take-over) before it gives up."""


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
        transitions: Transitions,
        schedule: Schedule,
        handbacks: HandBacks,
        context: ContextStore,
        messages: MessageStore,
        followers: RunFollowers | None = None,
    ) -> None:
        self.settings = settings
        self.handbacks = handbacks
        self.context = context
        self.messages = messages
        self.db = db
        self.blobs = blobs
        self.keys = keys
        self.sandboxes = sandboxes
        self.environments = environments
        self.checkpointer = checkpointer
        self.records = records
        self.transitions = transitions
        self.schedule = schedule
        self.steps = Steps(sandboxes, blobs, keys)
        """Each turn's steps' trees and patches (:mod:`.steps`)."""
        self.followers = followers or RunFollowers(sandboxes)
        """Who follows the running turns' runs for this process: the watch, the waits and the
        turn watch read what they saw instead of calling into the sandbox."""

    # -- asking for a turn ------------------------------------------------------------------

    def ensure(self, session: Session) -> Turn:
        """The record of the turn ``session``'s start (new, send) asks for (made by the
        request that asked for it, or by the start's last step, whichever comes first), with
        the session's output schema, and the message and context as the intent holds them
        (a large message by its reference: :mod:`.messages`)."""
        intent = session.start
        assert intent is not None and intent.turn is not None and intent.message is not None
        try:
            return self.db.add_turn(Turn(session_id=session.id, n=intent.turn,
                                         message=intent.message, message_ref=intent.message_ref,
                                         output_schema=session.output_schema,
                                         context=list(intent.context),
                                         permission_mode=(intent.permission_mode
                                                          or session.permission_mode)))  # fmt: skip
        except AlreadyExists:
            return self.db.get_turn(session.id, intent.turn)

    # -- starting (the last step of a start) -----------------------------------------------

    def start(self, session: Session, token: str) -> Session:
        """Start the intent's turn detached in the session's ready sandbox: STARTING to ACTIVE.
        If the harness cannot start, the turn is FAILED and the session IDLE with its sandbox
        (nothing is lost). Safe to repeat: a run already started is not started again."""
        assert session.start is not None and session.sandbox_id is not None
        turn = self.ensure(session)
        harness = get_harness(session.harness)
        if not run_started(self.sandboxes, session.sandbox_id, turn.run_id):
            key = None
            if self.settings.live_turns and harness.can_steer:
                # On the record before the prompt is read: from here on a message for this
                # turn is a steer (:mod:`.steering`) instead of joining its queue, so the
                # queue read below is the whole of it.
                key = self.command_key(turn) or commands.new_key()
                if turn.command_key is None:
                    wrapped = base64.b64encode(self.keys.wrap(key)).decode()
                    turn = self._set(turn, command_key=wrapped)
            earlier = [t for t in self.db.list_turns(session.id) if t.n < turn.n]
            # the whole message, byte for byte, then what was queued for it, in order; the
            # account quotes earlier turns' openings
            texts = [self.messages.text(turn.message, turn.message_ref),
                     *(self.messages.text(q.message, q.message_ref) for q in turn.queued)]
            whole = turn.model_copy(update={"message": "\n\n".join(texts)})
            prompt, handoff = conversations.prompt(session, harness, whole, earlier,
                                                   self._source_turns(session))  # fmt: skip
            prompt = layout.with_note(prompt, session, turn.output_schema,
                                      intake.prompt_lines(session, turn.n, turn.context))
            chosen = session.harness_session or turn.harness_session or str(uuid.uuid4())
            limit = timeouts.turn_limit(self.settings,
                                        self.environments.require(session.environment),
                                        session.start.timeout_minutes)  # fmt: skip
            turn = self._set(turn, harness_session=chosen, handoff=handoff,
                                     harness=harness.name, timeout_minutes=limit)  # fmt: skip
            try:
                layout.prepare(self.sandboxes, session)
                base = intake.deliver(self.sandboxes, self.context, session, turn,
                                      repo_dir_for(session.repo or ""))  # fmt: skip
                if base is not None:  # a bundle started the branch fresh on its own base
                    turn = self._set(turn, context_base=base)
                spec = self._spec(session, turn, harness, prompt)
                warnings = start_turn(self.sandboxes, session.sandbox_id, harness, spec,
                                      turn.run_id, key, self.settings.tree_slow_ms)  # fmt: skip
                if warnings:  # (a finisher's handback adds its own to these)
                    turn = self._set(turn, warnings=[*turn.warnings, *warnings])
            except HangarError as exc:
                self._set(turn, finished_at=utcnow(), outcome=TurnOutcome.FAILED,
                                  error_code=exc.code, summary=exc.message)  # fmt: skip
                idle = self.transitions.turn_not_started(session, token, exc.message)
                self.schedule.claim_expiry(idle)
                self.schedule.housekeeping(idle)  # its sandbox still idles and expires
                return idle
        turn = self._set(turn, started_at=turn.started_at or utcnow())
        rebased = {"base_commit": turn.context_base} if turn.context_base else {}
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        self.schedule.watch(session.id)  # first: a turn running must always be watched
        active = self.transitions.activate(session, token, last_active_at=utcnow(),
                                           sandbox_expires_at=utcnow() + ttl,
                                           **rebased)  # fmt: skip
        self.schedule.claim_expiry(active)
        renew_lease(self.sandboxes, active)
        return active

    def notify_env(self, session: Session) -> str | None:
        """The session's environment when it has a notify URL of its own (its events go
        there), else None (HANGAR_NOTIFY_URL's, if set)."""
        try:
            own = self.environments.require(session.environment).notify_url
        except NotFound:
            return None
        return session.environment if own else None

    def command_key(self, turn: Turn) -> bytes | None:
        """The live turn's command key (None: a one-shot turn)."""
        if turn.command_key is None:
            return None
        return self.keys.unwrap(base64.b64decode(turn.command_key))

    def _set(self, turn: Turn, **changes: object) -> Turn:
        """Set fields of a starting turn whatever else was written meanwhile: a steer given
        its ``seq``, a message queued before the command key was set (neither touches these
        fields)."""
        while True:
            try:
                return self._update_turn(turn, **changes)
            except VersionConflict:
                turn = self.db.get_turn(turn.session_id, turn.n)

    def _update_turn(self, turn: Turn, **changes: object) -> Turn:
        return self.db.update_turn(turn.model_copy(update=changes))

    def _spec(self, session: Session, turn: Turn, harness: Harness, prompt: str) -> TurnSpec:
        resuming = bool(session.harness_session)
        return TurnSpec(
            prompt=prompt,
            cwd=repo_dir_for(session.repo or ""),
            model=session.model,
            conversation_id=session.harness_session if resuming else None,
            fork_from=session.fork_from if not resuming and harness.can_fork else None,
            new_id=None if resuming else turn.harness_session,
            env=self._env(session),
            asks=turn.permission_mode is not PermissionMode.AUTO and turn.command_key is not None,
        )

    def _env(self, session: Session) -> dict[str, str]:
        """A turn's environment: the environment's variables and opened secrets, then the
        exchange's (``$HANGAR_IO``)."""
        env = self.environments.require(session.environment)
        return {**self.environments.turn_env(env), **layout.turn_env(session)}

    def interactive(self, session: Session) -> Invocation:
        """The harness resuming the session's conversation interactively (the terminal's
        agent mode), with everything a turn of it gets: its configuration files under HOME
        are written first, and ``env`` is the turn's environment with the harness's own
        settings on top (for the process environment: secrets never go on a command line).
        The caller checks the session has a sandbox and a conversation."""
        assert session.sandbox_id is not None and session.harness_session is not None
        harness = get_harness(session.harness)
        spec = TurnSpec(prompt="", cwd=repo_dir_for(session.repo or ""), model=session.model,
                        conversation_id=session.harness_session,
                        env=self._env(session))  # fmt: skip
        invocation = harness.interactive(spec)
        for warning in write_home_files(self.sandboxes, session.sandbox_id, harness, spec):
            logger.warning("the agent terminal of session %s: %s", session.id, warning)
        return Invocation(argv=invocation.argv, env={**spec.env, **invocation.env})

    def _source_turns(self, session: Session) -> list[Turn]:
        """For a fork, the turns of the session it was forked from, up to the fork."""
        if not session.forked_from:
            return []
        source = self.db.list_turns(session.forked_from)  # empty once the source is deleted
        return [t for t in source if t.requested_at <= session.created_at]

    # -- finishing --------------------------------------------------------------------------

    def watch(self, session: Session) -> Session:
        """If the session's running turn has ended, finish it (see :meth:`finish`); if it ran
        past one of its limits (:mod:`.timeouts`), record why and stop its run, then finish it
        (it ends TIMED_OUT); if its sandbox is gone, interrupt the turn and suspend the session
        to resume from its last checkpoint. Returns the session as it is now."""
        if session.state is not S.ACTIVE or not session.sandbox_id:
            return session
        turn = self.turn(session.id, None)
        if turn.finished_at is None:
            try:
                status = self.followers.status(session.sandbox_id, turn.active_run_id,
                                               watch=progress_file(session))  # fmt: skip
                # an agent waiting for a person's approval is not idle
                quiet = None if session.pending_approvals else status.idle_seconds
                why = None if status.finished else timeouts.overdue(
                    self.settings, turn, quiet, utcnow())  # fmt: skip
                if why is not None:
                    turn = self._stop_for(session, turn, why)
                stopping = turn.stopped_for is not None or self._repair_overdue(turn)
                if not status.finished and stopping:
                    stop_run(self.sandboxes, session.sandbox_id, turn.active_run_id)
                    status = self.followers.wait_end(session.sandbox_id, turn.active_run_id,
                                                     STOP_SEEN, watch=progress_file(session))
            except SandboxNotFound:
                return self.lose_sandbox(session, "the sandbox was lost during the turn; the "
                                         "session resumes from its last checkpoint")  # fmt: skip
            except SandboxError:
                return session
            if not status.finished:
                return session
        return self.finish(session)

    def seen_stopped(self, session: Session, run_id: str) -> None:
        """Wait until this process's followers have seen a run of the session's that was just
        stopped end (up to :data:`STOP_SEEN` seconds), so the watch after a stop finishes the
        turn."""
        assert session.sandbox_id is not None
        try:
            self.followers.wait_end(session.sandbox_id, run_id, STOP_SEEN,
                                    watch=progress_file(session))  # fmt: skip
        except (SandboxError, SandboxNotFound):
            pass  # the watch sees to it

    def _stop_for(self, session: Session, turn: Turn, why: str) -> Turn:
        """The turn with ``why`` recorded as the reason its run is to be stopped. Recorded
        before the stop, and the run is stopped only once it is (by :meth:`watch`): a watcher
        that dies between the two is followed by one that stops it again, and the finish knows
        the stop for a time-out. A reason recorded already, or a turn that ended meanwhile, is
        left as it is."""
        for _ in range(5):
            if turn.stopped_for is not None or turn.finished_at is not None:
                return turn
            try:
                turn = self._update_turn(turn, stopped_for=why)
                logger.info("stopping turn %d of %s: %s", turn.n, session.id, why)
                return turn
            except VersionConflict:
                turn = self.db.get_turn(session.id, turn.n)  # written meanwhile: look again
        return turn  # still changing under us: the next watch tries again

    def _repair_overdue(self, turn: Turn) -> bool:
        limit = timedelta(minutes=self.settings.exchange_repair_timeout_minutes)
        return turn.repair is not None and utcnow() > turn.repair.started_at + limit

    def finish(self, session: Session) -> Session:
        """Claim the turn's end, record its outcome and run log, take its one ``turn``
        checkpoint, and move the session to IDLE. A caller that loses the claim, before its
        work or during it (taken over, or the session changed under its last write), gets the
        session as it is: whoever holds the claim, or takes it over once its lease has run
        out, finishes the turn (a ``wait`` goes on waiting for that)."""
        if session.claim is not None and session.claim.until > utcnow():
            return session  # being finished by someone else
        self.schedule.expect_claim(session.id)
        try:
            claimed = self.transitions.claim_finish(session)
        except SessionBusy:
            return self.db.get_session(session.id)
        assert claimed.claim is not None and claimed.sandbox_id is not None
        token = claimed.claim.token
        self.schedule.claim_expiry(claimed)
        try:
            return self.finish_claimed(claimed, token)
        except SessionBusy:
            logger.info("the finish of %s's turn passed to another worker", session.id)
            return self.db.get_session(session.id)

    def finish_claimed(self, session: Session, token: str) -> Session:
        """The work of a finish claim (also taken over from a finisher that died). A try that
        raises anything but a lost claim is logged and noted on the claim, whose lease is left
        to run out: the claim tick (or a ``wait``) takes the finish over and tries again. A last
        try that fails, or a take-over past :data:`MAX_FINISH_TRIES`, gives up instead
        (:meth:`_give_up`)."""
        assert session.claim is not None
        if session.claim.tries > MAX_FINISH_TRIES:
            return self._give_up(session, token, session.claim.error or
                                 "the worker finishing it stopped every time")  # fmt: skip
        try:
            return self._finish_claimed(session, token)
        except SessionBusy:
            raise  # the finish was taken over: the new holder's to do
        except Exception as exc:  # one try's boundary: whatever it was, it counts
            logger.exception("try %d of %d at finishing the turn of %s failed",
                             session.claim.tries, MAX_FINISH_TRIES, session.id)  # fmt: skip
            reason = exc.message if isinstance(exc, HangarError) else f"{type(exc).__name__}: {exc}"
            return self._failed_try(session.id, token, " ".join(reason.split())[:500])

    def _failed_try(self, session_id: str, token: str, reason: str) -> Session:
        current = self.db.get_session(session_id)
        if current.claim is None or current.claim.token != token:
            return current  # taken over meanwhile
        if current.claim.tries >= MAX_FINISH_TRIES:
            return self._give_up(current, token, reason)
        noted = self.transitions.note_failure(current, token, reason)
        self.schedule.claim_expiry(noted)  # the take-over, when the lease runs out
        return noted

    def _give_up(self, session: Session, token: str, reason: str) -> Session:
        """The finish failed every try: an unfinished turn is FAILED (code ``internal``, the
        reason as its summary; a repair run still going is stopped), and the session IDLE with
        the reason as its ``error``. The sandbox stays, with everything in it: the idle suspend
        checkpoints it."""
        why = f"the turn's end could not be recorded ({MAX_FINISH_TRIES} tries): {reason}"
        turn = self.turn(session.id, None)
        if turn.finished_at is None:
            if session.sandbox_id and turn.repair is not None and turn.repair.exit_code is None:
                try:
                    stop_run(self.sandboxes, session.sandbox_id, turn.repair.run_id)
                except (SandboxError, SandboxNotFound):
                    pass  # gone with its sandbox
            turn = self._update_turn(turn, finished_at=utcnow(), outcome=TurnOutcome.FAILED,
                                     error_code=HangarError.code, summary=why)  # fmt: skip
        idle = self.transitions.finish_turn(
            self.db.get_session(session.id), token, last_active_at=utcnow(), error=why,
            last_summary=turn.summary, turn_count=turn.n, needs_input=None, question_options=[])
        self.schedule.turn_ended(idle, turn, self.notify_env(idle))
        self.schedule.cancel_watch(session.id)
        self.schedule.claim_expiry(idle)
        self.schedule.housekeeping(idle)
        return idle

    def _finish_claimed(self, session: Session, token: str) -> Session:
        assert session.sandbox_id is not None
        turn = self.turn(session.id, None)
        if turn.finished_at is None:
            try:
                with self.transitions.keeping(session.id, token):
                    turn = self._settle(session, turn)
            except SandboxNotFound:
                return self.lose_sandbox(session, "the sandbox was lost during the turn")
            if turn.finished_at is None:  # its repair run goes on: let the claim go
                active = self.transitions.await_repair(self.db.get_session(session.id), token)
                self.schedule.watch(session.id)
                return active
        good = turn.outcome in (TurnOutcome.EXITED, TurnOutcome.NEEDS_INPUT)
        asking = turn.outcome is TurnOutcome.NEEDS_INPUT
        try:
            with self.transitions.keeping(session.id, token):  # a big one outlasts the lease
                take_checkpoint(self.checkpointer, self.records, session, CheckpointReason.TURN)
            error = None if good or turn.outcome is TurnOutcome.INTERRUPTED else turn.summary
        except CheckpointError as exc:
            logger.error("checkpoint after turn %d of %s failed: %s", turn.n, session.id, exc)
            error = f"checkpoint after turn {turn.n} failed: {exc.message}"
        changes: dict[str, object] = {
            "last_active_at": utcnow(), "error": error, "last_summary": turn.summary,
            "turn_count": turn.n, "needs_input": turn.question if asking else None,
            "question_options": turn.question_options if asking else [],
        }  # fmt: skip
        current = self.db.get_session(session.id)
        stopped = turn.outcome in (TurnOutcome.INTERRUPTED, TurnOutcome.TIMED_OUT)
        if (good or stopped) and turn.harness_session:  # (a stopped one's: saved, or None)
            ran = turn.harness or current.harness
            changes.update(fork_from=None,
                           conversations=conversations.after_turn(current, turn, ran))  # fmt: skip
            if ran == current.harness:
                changes["harness_session"] = turn.harness_session
        idle = self.transitions.finish_turn(current, token, **changes)
        self.schedule.turn_ended(idle, turn, self.notify_env(idle))  # HANGAR_NOTIFY_URL's
        self.schedule.cancel_watch(session.id)
        self.schedule.claim_expiry(idle)
        self.schedule.housekeeping(idle)
        return idle

    def _settle(self, session: Session, turn: Turn) -> Turn:
        """Carry the unfinished turn whose run has ended as far as it goes: its outcome, what it
        handed back, its repair run (started, or recorded once ended), then ``finished_at``.
        Each step is recorded before the next, so a finisher taking over goes on from there."""
        assert session.sandbox_id is not None
        if turn.exit_code is None:
            status = self.followers.log(session.sandbox_id, turn.run_id, MAX_LOG_BYTES)
            assert status.exit_code is not None, "a finish is claimed once the run has ended"
            turn = self._record_outcome(session, turn, status.data, status.exit_code,
                                        status.stderr)  # fmt: skip
        if not turn.collected:
            turn = self.handbacks.read(session, turn)
        if turn.repair is not None and turn.repair.exit_code is None:
            if not run_started(self.sandboxes, session.sandbox_id, turn.repair.run_id):
                turn = self._start_repair(session, turn)
        if turn.repair is not None and turn.repair.exit_code is None:
            status = read_run(self.sandboxes, session.sandbox_id, turn.repair.run_id, 0,
                              MAX_LOG_BYTES)  # fmt: skip
            if not status.finished:
                return turn
            turn = self._record_repair(session, turn, status)
        return self._update_turn(turn, finished_at=utcnow())

    def _repair_spec(self, session: Session, turn: Turn, harness: Harness) -> TurnSpec:
        assert turn.repair is not None and turn.output_schema is not None
        prompt = layout.with_note(repair_prompt(turn.repair.reason, turn.output_schema), session,
                                  turn.output_schema)  # fmt: skip
        spec = self._spec(session, turn, harness, prompt)
        return replace(spec, conversation_id=turn.harness_session, fork_from=None, new_id=None)

    def _start_repair(self, session: Session, turn: Turn) -> Turn:
        """Start the repair run recorded on the turn (its record came first, with what was
        handed back, so a finisher taking over starts it if it never ran): the turn's
        conversation asked once more for a valid result."""
        assert session.sandbox_id is not None and turn.repair is not None
        harness = get_harness(turn.harness or session.harness)
        try:
            start_turn(self.sandboxes, session.sandbox_id, harness,
                       self._repair_spec(session, turn, harness), turn.repair.run_id)  # fmt: skip
        except HangarError as exc:
            repair = turn.repair.model_copy(update={"exit_code": -1})
            return self._update_turn(turn, repair=repair, result_error=f"{turn.repair.reason} "
                                     f"(the repair turn could not start: {exc.message})")  # fmt: skip
        return turn

    def _record_repair(self, session: Session, turn: Turn, status: RunStatus) -> Turn:
        assert session.sandbox_id is not None and turn.repair is not None
        assert status.exit_code is not None
        harness = get_harness(turn.harness or session.harness)
        result = turn_result(self.sandboxes, session.sandbox_id, harness,
                             self._repair_spec(session, turn, harness), turn.repair.run_id,
                             status.data, status.exit_code)  # fmt: skip
        failure = None
        if status.exit_code == INTERRUPTED_EXIT:
            failure = "the repair turn was stopped"
        elif result.error is not None:
            failure = f"the repair turn failed: {result.error.message}"
        changes = self.handbacks.read_repaired(session, turn, failure)
        if turn.log_key:  # the repair's events count toward the turn: after the turn's own,
            # under the same data key (a finisher that dies after this write leaves a log that
            # still opens, and the one taking over writes the same bytes again)
            own = self.log_of(session, turn)[: turn.log_cursor]
            self._store_log(session.id, turn.n, own + status.data,
                            self.keys.unwrap(base64.b64decode(turn.log_key)))  # fmt: skip
        repair = turn.repair.model_copy(update={"exit_code": status.exit_code})
        return self._update_turn(turn, repair=repair, repair_usage=result.usage, **changes)

    def _record_outcome(self, session: Session, turn: Turn, log: bytes, exit_code: int,
                        stderr: bytes | None = None) -> Turn:  # fmt: skip
        harness = get_harness(turn.harness or session.harness)
        assert session.sandbox_id is not None
        spec = self._spec(session, turn, harness, turn.message)
        result = turn_result(self.sandboxes, session.sandbox_id, harness, spec, turn.run_id, log,
                             exit_code, stderr)  # fmt: skip
        log_key = self._store_log(session.id, turn.n, log)
        outcome = TurnOutcome.EXITED if result.ok else TurnOutcome.FAILED
        error = result.error
        summary = result.summary if result.ok else (error.message if error else None)
        conversation = result.conversation_id or turn.harness_session
        if exit_code == INTERRUPTED_EXIT:
            outcome, error = TurnOutcome.INTERRUPTED, None
            if turn.stopped_for is not None:  # stopped by hangar: a limit ran out
                outcome = TurnOutcome.TIMED_OUT
            summary = (turn.stopped_for or "interrupted") + (
                f"; its last words: {result.summary}" if result.summary else "")  # fmt: skip
            # The next turn resumes its conversation where the harness wrote it before it was
            # stopped (else the next turn starts one, with the account of this one).
            if conversation and not conversation_saved(self.sandboxes, session.sandbox_id,
                                                       harness, conversation):  # fmt: skip
                conversation = None
        finished = turn.model_copy(update={
            "exit_code": exit_code, "outcome": outcome,
            "summary": summary, "usage": result.usage,
            "harness_session": conversation,
            "error_code": error.code if error else None, "log_key": log_key,
            "log_cursor": len(log),
        })  # fmt: skip
        if self.settings.tree_slow_ms > 0 and not turn.steps:  # the turn's trees, kept
            try:
                steps, key = self.steps.keep(session, turn)
                finished = finished.model_copy(update={"steps": steps, "steps_key": key})
            except (SandboxError, SandboxNotFound) as exc:
                logger.warning("the steps of turn %d of %s were not kept: %s", turn.n,
                               session.id, exc.message)  # fmt: skip
        try:
            return self.db.update_turn(finished)
        except VersionConflict:
            return self.db.get_turn(session.id, turn.n)  # recorded by a finisher before us

    def lose_sandbox(self, session: Session, why: str) -> Session:
        """The session's sandbox is gone: its running turn is INTERRUPTED and the session
        SUSPENDED, to resume from its last checkpoint (what the turn did since is lost with the
        sandbox). Whoever moved the session to another sandbox or state meanwhile wins."""
        sandbox_id = session.sandbox_id
        logger.warning("sandbox %s of session %s is gone; suspending it", sandbox_id, session.id)
        for turn in self.db.list_turns(session.id):
            if turn.finished_at is None:
                try:
                    self._update_turn(turn, finished_at=utcnow(),
                                      outcome=TurnOutcome.INTERRUPTED, summary=why)  # fmt: skip
                except VersionConflict:
                    pass  # someone else finished it
        for _ in range(10):
            current = self.db.get_session(session.id)
            if current.sandbox_id != sandbox_id or current.state not in (S.IDLE, S.ACTIVE):
                return current
            try:
                lost = self.transitions.lose_sandbox(current)
            except SessionBusy:
                continue  # a write meanwhile (activity, a lease): look again
            self.schedule.cancel_watch(session.id)
            self.schedule.claim_expiry(lost)
            return lost
        return self.db.get_session(session.id)

    # -- waiting ----------------------------------------------------------------------------

    def wait(
        self,
        ref: str,
        n: int | None = None,
        *,
        timeout: float = 600,
        on_output: Callable[[bytes], None] | None = None,
        poll: float = 0.5,
    ) -> Turn:
        """Wait for turn ``n`` (default: the latest) to be over (finished, its checkpoint taken
        and the session IDLE again), feeding new run-log bytes to ``on_output`` as they come;
        returns the turn, unfinished if ``timeout`` passed first. Finishes the turn itself when
        its run has ended (the watch tick would too)."""
        session = self.records.resolve(ref)
        deadline = time.monotonic() + timeout
        cursor = 0
        while True:
            session = self.db.get_session(session.id)
            turn = self.turn(session.id, n)
            latest = turn.n == len(self.db.list_turns(session.id))
            if latest and session.state is S.ACTIVE:
                session = self.watch(session)
            turn = self.turn(session.id, turn.n)
            settled = turn.finished_at is not None and not (
                latest and session.state is S.ACTIVE)  # fmt: skip
            left = deadline - time.monotonic()
            if settled or left <= 0:
                return turn
            running = turn.started_at is not None and turn.finished_at is None
            if running and session.sandbox_id and session.state is S.ACTIVE:
                cursor = self._follow(session, turn, cursor, on_output, min(left, LOOK_SECONDS),
                                      poll)  # fmt: skip
            else:
                time.sleep(min(poll, left))  # starting or finishing: the db's to say

    def _follow(self, session: Session, turn: Turn, cursor: int,
                on_output: Callable[[bytes], None] | None, timeout: float,
                poll: float) -> int:  # fmt: skip
        """Wait up to ``timeout`` seconds for the turn's run to say something (its log from
        ``cursor``, fed to ``on_output``) or, without ``on_output`` or once its own run has
        ended, for its active run to end; through this process's followers, so no wait calls
        into the sandbox once per look. Returns the cursor after what was fed."""
        assert session.sandbox_id is not None
        watch = progress_file(session)
        try:
            if on_output is not None and turn.exit_code is None:
                status = self.followers.wait(session.sandbox_id, turn.run_id, cursor, timeout,
                                             watch=watch)  # fmt: skip
                if status.data:
                    on_output(status.data)
                    return status.cursor
            else:
                status = self.followers.wait_end(session.sandbox_id, turn.active_run_id, timeout,
                                                 watch=watch)  # fmt: skip
        except (SandboxError, SandboxNotFound):
            status = None  # the watch sees to a lost sandbox; look again a little later
        if status is None or status.finished:
            time.sleep(min(poll, timeout))  # ended: its finish is the db's to say
        return cursor

    def turn(self, session_id: str, n: int | None) -> Turn:
        """Turn ``n`` of the session (None: the latest); NotFound when it has no turns,
        InvalidInput for a number outside its turns."""
        turns = self.db.list_turns(session_id)
        if not turns:
            raise NotFound(f"session {session_id} has no turns", session_id=session_id)
        if n is None:
            return turns[-1]
        if not 1 <= n <= turns[-1].n:
            raise InvalidInput(f"turn must be from 1 to {turns[-1].n} (the session's turns), "
                               f"not {n}", field="turn")  # fmt: skip
        return self.db.get_turn(session_id, n)

    # -- run logs ---------------------------------------------------------------------------

    def _store_log(self, session_id: str, n: int, log: bytes,
                   data_key: bytes | None = None) -> str:  # fmt: skip
        """Seal and store a turn's run log (under ``data_key``, else a fresh one); returns the
        key, wrapped."""
        data_key = data_key or new_data_key()
        aad = run_log_key(session_id, n).encode()
        # Overwrites: a finish taken over from one that died may store the log again.
        self.blobs.put(run_log_key(session_id, n), seal(data_key, aad, [log[:MAX_LOG_BYTES]]))
        return base64.b64encode(self.keys.wrap(data_key)).decode()

    def log_of(self, session: Session, turn: Turn) -> bytes:
        """The turn's stored run log (it must have one)."""
        assert turn.log_key is not None
        data_key = self.keys.unwrap(base64.b64decode(turn.log_key))
        aad = run_log_key(session.id, turn.n).encode()
        with self.blobs.open(run_log_key(session.id, turn.n)) as stream:
            return b"".join(unseal(data_key, aad, stream))

    def log(self, ref: str, n: int | None = None) -> bytes:
        """A turn's run log (default: the latest turn): live while it runs, stored after.
        Reads only: it never finishes a turn."""
        session = self.records.resolve(ref)
        turn = self.turn(session.id, n)
        if turn.log_key:
            return self.log_of(session, turn)
        if session.sandbox_id and turn.started_at:
            try:
                return read_run(self.sandboxes, session.sandbox_id, turn.run_id, 0, MAX_LOG_BYTES).data
            except (SandboxError, SandboxNotFound):
                pass
        return b""

"""Starting a session, off the request path: a chain of short ``start`` ticks.

``new``, ``send``, ``open`` and ``fork`` check everything, claim the session for a start
(STARTING, with the start's intent and a lease) and answer at once (:meth:`Startup.begin`).
Each ``start`` tick then does one short step and schedules the next, recording where it is in
the session's ``phase``::

    creating_sandbox -> cloning -> running_setup -> restoring -> starting_turn (new, send)
                                                              -> IDLE            (open, fork)

A new sandbox may be pending for a while (a cluster bringing a node up): ``creating_sandbox``
waits for it within the step, up to :func:`sandbox_wait` seconds (the port's
``await_status``, the claim's lease kept meanwhile), and while it is still pending records it
with the backend's reason as the phase's detail and the tick comes back until it is ready
(nothing is exec'd into it before), for at most
``HANGAR_SETUP_TIMEOUT_MINUTES`` from its making; a sandbox whose status is failed fails the
start with its reason. Clone and setup run detached in the sandbox and are polled; nothing
here waits on them, so no tick comes near a dispatch deadline. A session that already has a
sandbox goes straight to its turn. Each step is safe to repeat: a worker that dies mid-step leaves an expired claim, and
the ``claim`` tick hands the start to the next worker (:meth:`Startup.resume`), which finds the
sandbox, the runs and the turn where they were (a sandbox made but never recorded is destroyed;
a run already started is not started again). After :data:`MAX_ATTEMPTS` take-overs, or on any
error, the start fails: FAILED with ``start_error`` (the step, what failed, the message), the
sandbox it made destroyed (it holds nothing yet), the turn it was for FAILED; ``send`` and
``open`` try again and nothing else is lost. A start with no place left for its sandbox
(``HANGAR_MAX_SANDBOXES``) is refused at its request, or fails this way with
``capacity_exhausted`` when it raced past that check (:mod:`hangar.sessions.capacity`). A
failure to start the harness itself, in a ready sandbox, leaves the session IDLE with that
sandbox instead.
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import Any

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    HangarError,
    SandboxError,
    SandboxNotFound,
    SessionBusy,
    SessionNotFound,
)
from hangar.models import CheckpointReason, ClaimKind, Environment, Phase, Session
from hangar.models import SessionState as S, SkippedCheckpoint
from hangar.models import StartError, StartIntent, StartKind, StartStep, TurnOutcome, utcnow
from hangar.sandboxes import SandboxState, SandboxStatus
from hangar.sandboxes.policy import SandboxPolicy
from hangar.sessions.capacity import Capacity
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.environments import Environments
from hangar.sessions.records import Records
from hangar.checkpoints.restore import Restorer
from hangar.sessions.sandbox import Provisioner, sandbox_alive, take_checkpoint
from hangar.sessions.schedule import POLL_SECONDS, Schedule, StartTick
from hangar.sessions.transitions import LostClaim, Transitions, new_claim
from hangar.sessions.turns import Turns
from hangar.sessions.workspace import read_workspace, repo_dir_for

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Take-overs of a start whose worker died before it gives up (a step that kills its worker
every time must not loop for ever)."""

SANDBOX_WAIT_SECONDS = 20.0
"""The longest one ``creating_sandbox`` step waits for a pending sandbox (:func:`sandbox_wait`):
a cluster's warm sandbox is ready within it, so a start costs no second tick; a cold one (a
node added) spans a few ticks, each short of a dispatch deadline."""


def sandbox_wait(lease_seconds: float) -> float:
    """How long a step waits for a new sandbox to stop pending: :data:`SANDBOX_WAIT_SECONDS`,
    or a third of the claim's lease (``HANGAR_CLAIM_LEASE_SECONDS``) when that is shorter,
    so that a lease is renewed (:meth:`Transitions.keeping`) at least twice before it would
    run out, even with a renewal missed."""
    return max(0.0, min(SANDBOX_WAIT_SECONDS, lease_seconds / 3))


_WHAT = {
    StartStep.CREATING_SANDBOX: "making the sandbox",
    StartStep.CLONING: "cloning the repo",
    StartStep.RUNNING_SETUP: "the environment's setup",
    StartStep.RESTORING: "restoring the checkpoint",
    StartStep.STARTING_TURN: "starting the turn",
}


class Startup:
    """Begins starts and carries them on, one step per ``start`` tick."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        sandboxes: SandboxPolicy,
        environments: Environments,
        provisioner: Provisioner,
        restorer: Restorer,
        checkpointer: Checkpointer,
        records: Records,
        transitions: Transitions,
        schedule: Schedule,
        turns: Turns,
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.environments = environments
        self.provisioner = provisioner
        self.restorer = restorer
        self.checkpointer = checkpointer
        self.records = records
        self.transitions = transitions
        self.schedule = schedule
        self.turns = turns
        self.capacity = Capacity(settings, db, sandboxes)

    # -- beginning --------------------------------------------------------------------------

    def begin(self, session: Session, intent: StartIntent, **changes: Any) -> Session:
        """Claim the session for a start of ``intent`` (with ``changes``: a new harness, model)
        and schedule its first step; of two concurrent callers exactly one wins, the other gets
        SessionBusy."""
        self.schedule.expect_claim(session.id)
        claimed = self.transitions.claim_start(session, intent, **changes)
        assert claimed.claim is not None
        self.schedule.claim_expiry(claimed)
        self.schedule.start_step(claimed.id, claimed.claim.token)
        return claimed

    def create(self, session: Session, intent: StartIntent) -> Session:
        """Create a session already claimed for a start of ``intent`` (new, fork) and schedule
        its first step. NameTaken when the name is in use (nothing is created)."""
        self.schedule.expect_claim(session.id)
        claim = new_claim(ClaimKind.START, self.transitions.lease_seconds)
        made = self.db.create_session(session.model_copy(update={
            "state": S.STARTING, "claim": claim, "start": intent, "turn_count": intent.turn or 0,
            "phase": Phase(step=StartStep.CREATING_SANDBOX)}))  # fmt: skip
        self.schedule.claim_expiry(made)
        self.schedule.start_step(made.id, claim.token)
        return made

    def resume(self, session: Session) -> None:
        """A start whose worker died (its claim expired): take it over and carry it on from
        where it was, or fail it after MAX_ATTEMPTS take-overs."""
        try:
            taken = self.transitions.take_over(session)
        except SessionBusy:
            return  # renewed meanwhile: its worker lives
        assert taken.claim is not None and taken.start is not None
        token = taken.claim.token
        attempts = taken.start.attempts + 1
        if attempts > MAX_ATTEMPTS:
            self._fail(taken, token, SandboxError(
                f"the start was interrupted {MAX_ATTEMPTS} times"), "the start kept dying")  # fmt: skip
            return
        taken = self.transitions.advance(
            taken, token, taken.phase.step if taken.phase else StartStep.CREATING_SANDBOX,
            taken.phase.detail if taken.phase else "",
            start=taken.start.model_copy(update={"attempts": attempts}),
        )  # fmt: skip
        self.schedule.claim_expiry(taken)
        self.schedule.start_step(taken.id, token)

    # -- one step ---------------------------------------------------------------------------

    def step(self, tick: StartTick) -> None:
        """Carry the start of ``tick`` one step on. A tick of another claim (stale, forged, or
        the start was taken over) does nothing."""
        session = self.db.get_session(tick.session)
        claim = session.claim
        if session.state is not S.STARTING or claim is None or claim.token != tick.token:
            return
        try:
            self._step(session, tick.token)
        except LostClaim:
            return  # taken over: the new holder carries on
        except HangarError as exc:
            current = self.db.get_session(session.id)
            if current.claim is None or current.claim.token != tick.token:
                return
            step = current.phase.step if current.phase else StartStep.CREATING_SANDBOX
            self._fail(current, tick.token, exc, _WHAT[step])

    def _step(self, session: Session, token: str) -> None:
        """One step. Whether the start's sandbox still exists is not asked first (a request
        per step): a step that finds it gone (SandboxNotFound of that sandbox) goes back to
        making one."""
        env = self.environments.require(session.environment)
        try:
            self._step_on(session, token, env)
        except SandboxNotFound as exc:
            gone = session.sandbox_id
            if not gone or exc.data.get("sandbox_id", gone) != gone:
                raise
            current = self.db.get_session(session.id)
            if current.sandbox_id != gone or current.claim is None or current.claim.token != token:
                raise
            logger.info("start of %s: its sandbox %s went away; making another", session.id, gone)
            self.transitions.advance(current, token, StartStep.CREATING_SANDBOX, sandbox_id=None,
                                     start=current.start.model_copy(update={"run": None})
                                     if current.start else None)  # fmt: skip
            self.schedule.start_step(session.id, token)

    def _step_on(self, session: Session, token: str, env: Environment) -> None:
        assert session.start is not None and session.phase is not None
        intent, step = session.start, session.phase.step
        if step is StartStep.CREATING_SANDBOX and session.sandbox_id:
            if intent.run is not None:  # made by this start, pending when last seen
                self._await_sandbox(session, token, env)
                return
            if intent.kind in (StartKind.SEND, StartKind.NEW, StartKind.OPEN) and sandbox_alive(
                self.sandboxes, session
            ):
                self._after_restore(session, token)  # its sandbox is ready: nothing to make
                return
        if step is StartStep.CREATING_SANDBOX:
            info = self.provisioner.create(session, env)
            try:
                session, status = self._awaited(session, token, info.id)
            except SessionNotFound:  # deleted (forced) while its sandbox was made
                self.provisioner.destroy_all(session.id)
                raise
            if status.state is SandboxState.FAILED:
                self.provisioner.destroy_all(session.id)
                raise SandboxError(f"the sandbox failed to start: {status.reason}",
                                   sandbox_id=info.id)  # fmt: skip
            ready = status.state is SandboxState.READY
            if ready:
                self.provisioner.prepare(info.id)
            ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
            run = f"clone-{secrets.token_hex(4)}"
            try:
                session = self.transitions.advance(
                    session, token, StartStep.CLONING if ready else StartStep.CREATING_SANDBOX,
                    env.repo if ready else status.reason, sandbox_id=info.id,
                    sandbox_expires_at=utcnow() + ttl,
                    start=intent.model_copy(update={"run": run}),
                )  # fmt: skip
            except SessionNotFound:  # deleted (forced) while its sandbox was made: no later
                self.provisioner.destroy_all(session.id)  # step would ever find this one
                raise
            if ready:
                self.provisioner.start_clone(session, env, run)
            self.schedule.start_step(session.id, token, POLL_SECONDS[0])
            return
        if not session.sandbox_id:  # recorded gone: make another
            session = self.transitions.advance(session, token, StartStep.CREATING_SANDBOX)
            self.schedule.start_step(session.id, token)
            return
        if step in (StartStep.CLONING, StartStep.RUNNING_SETUP):
            self._poll_run(session, token, env)
        elif step is StartStep.RESTORING:
            # With no setup, nothing has run on the clone: the restore need not undo anything.
            self._restore(session, token, fresh=not env.setup)
        else:
            self.turns.start(session, token)

    def _awaited(self, session: Session, token: str, sandbox_id: str
                 ) -> tuple[Session, SandboxStatus]:  # fmt: skip
        """The new sandbox's status once it stops pending, or its pending one after
        :func:`sandbox_wait` seconds, the claim's lease kept meanwhile; and the session read
        again (a renewal is a write)."""
        wait = sandbox_wait(self.transitions.lease_seconds)
        with self.transitions.keeping(session.id, token):
            status = self.provisioner.await_status(sandbox_id, wait)
        return self.db.get_session(session.id), status

    def _await_sandbox(self, session: Session, token: str, env: Environment) -> None:
        """The start's new sandbox was pending: wait for it again (:meth:`_awaited`). Ready:
        prepare it and clone. Pending: its reason becomes the phase's detail and the tick
        comes back (not past ``HANGAR_SETUP_TIMEOUT_MINUTES`` from the sandbox's making).
        Failed: the start fails with its reason."""
        assert session.sandbox_id is not None and session.start is not None
        run = session.start.run
        assert run is not None
        info = self.sandboxes.get(session.sandbox_id)
        session, status = self._awaited(session, token, info.id)
        if status.state is SandboxState.FAILED:
            raise SandboxError(f"the sandbox failed to start: {status.reason}",
                               sandbox_id=info.id)  # fmt: skip
        if status.state is SandboxState.PENDING:
            age = (utcnow() - info.created_at).total_seconds()
            limit = self.settings.setup_timeout_minutes
            if age > limit * 60:
                raise SandboxError(f"the sandbox was not ready within {limit:g} minutes: "
                                   f"{status.reason}", sandbox_id=info.id)  # fmt: skip
            session = self.transitions.advance(session, token, StartStep.CREATING_SANDBOX,
                                               status.reason)  # fmt: skip
            self.schedule.start_step(session.id, token, _poll_delay(age))
            return
        self.provisioner.prepare(info.id)
        session = self.transitions.advance(session, token, StartStep.CLONING, env.repo)
        self.provisioner.start_clone(session, env, run)
        self.schedule.start_step(session.id, token, POLL_SECONDS[0])

    def _poll_run(self, session: Session, token: str, env: Environment) -> None:
        assert session.start is not None and session.phase is not None
        intent, step = session.start, session.phase.step
        run = intent.run or f"{step.value}-{secrets.token_hex(4)}"
        # The read can wait on the sandbox (a follower's first frame, reads when none follows)
        # longer than a short lease: the claim is kept meanwhile, and its renewals are writes.
        with self.transitions.keeping(session.id, token):
            state = self.provisioner.run_state(session, run)
        session = self.db.get_session(session.id)
        if session.claim is None or session.claim.token != token or session.phase is None:
            return  # taken over while it read: the new holder carries on
        if not state.started:  # asked for, then its worker died before it ran
            session = self.transitions.advance(session, token, step, session.phase.detail,
                                               start=intent.model_copy(update={"run": run}))
            if step is StartStep.CLONING:
                self.provisioner.start_clone(session, env, run)
            else:
                self.provisioner.start_setup(session, env, run)
            self.schedule.start_step(session.id, token, POLL_SECONDS[0])
            return
        assert session.phase is not None
        age = (utcnow() - session.phase.since).total_seconds()
        if not state.finished:
            if step is StartStep.RUNNING_SETUP and age > self.settings.setup_timeout_minutes * 60:
                self.provisioner.stop(session, run)
                raise SandboxError(f"the environment's setup did not finish within "
                                   f"{self.settings.setup_timeout_minutes:g} minutes", run_id=run)  # fmt: skip
            self.schedule.start_step(session.id, token, _poll_delay(age))
            self.transitions.renew(session, token)
            return
        if state.exit_code != 0:
            what = "git clone" if step is StartStep.CLONING else "the environment's setup"
            raise SandboxError(f"{what} failed (exit {state.exit_code}): {state.stderr}",
                               exit_code=state.exit_code)  # fmt: skip
        if step is StartStep.CLONING:
            assert session.sandbox_id is not None
            ws = read_workspace(self.sandboxes, session.sandbox_id, env.repo, env.branch)
            changes: dict[str, Any] = {"base_commit": session.base_commit or ws.base_commit,
                                       "base_branch": session.base_branch or ws.base_branch}
            if env.setup:
                run = f"setup-{secrets.token_hex(4)}"
                session = self.transitions.advance(
                    session, token, StartStep.RUNNING_SETUP, env.setup.splitlines()[0][:80],
                    start=intent.model_copy(update={"run": run}), **changes)  # fmt: skip
                self.provisioner.start_setup(session, env, run)
                self.schedule.start_step(session.id, token, POLL_SECONDS[0])
                return
            session = self.transitions.advance(session, token, StartStep.RESTORING, "", **changes)
        else:
            session = self.transitions.advance(session, token, StartStep.RESTORING)
        self.schedule.start_step(session.id, token)

    def _restore(self, session: Session, token: str, *, fresh: bool) -> None:
        assert session.start is not None and session.sandbox_id is not None
        intent = session.start
        if intent.kind is StartKind.FORK:
            assert intent.source and intent.checkpoint
            checkpoint = self.db.get_checkpoint(intent.source, intent.checkpoint)
            with self.transitions.keeping(session.id, token):
                warnings = self.restorer.restore_checkpoint(
                    checkpoint, session.sandbox_id, repo_dir_for(session.repo or ""), fresh=fresh)
                take_checkpoint(self.checkpointer, self.records, session, CheckpointReason.MANUAL)
            changes: dict[str, object] = {"restored_from": checkpoint.id, "restore_skipped": [],
                                          "restore_warnings": warnings}  # fmt: skip
        else:
            with self.transitions.keeping(session.id, token):
                report = self.provisioner.restore(session, fresh=fresh)
            changes = {
                "restored_from": report.checkpoint.id if report else None,
                "restore_skipped": [SkippedCheckpoint(checkpoint_id=s.checkpoint_id, code=s.code,
                                                      message=s.message)
                                    for s in (report.skipped if report else [])],
                "restore_warnings": report.warnings if report else [],
            }  # fmt: skip
        session = self.db.get_session(session.id)
        self._after_restore(session, token, **changes)

    def _after_restore(self, session: Session, token: str, **changes: object) -> None:
        assert session.start is not None
        if session.start.kind in (StartKind.NEW, StartKind.SEND):
            detail = session.harness
            session = self.transitions.advance(session, token, StartStep.STARTING_TURN, detail,
                                               **changes)  # fmt: skip
            self.turns.start(session, token)
            return
        ready = self.transitions.ready(session, token, last_active_at=utcnow(), **changes)
        self.schedule.claim_expiry(ready)
        self.schedule.housekeeping(ready)

    # -- failing ----------------------------------------------------------------------------

    def _fail(self, session: Session, token: str, exc: HangarError, what: str) -> None:
        step = session.phase.step if session.phase else StartStep.CREATING_SANDBOX
        logger.warning("the start of session %s failed at %s: %s", session.id, step.value,
                       exc.message)  # fmt: skip
        if session.sandbox_id:  # made by this start, restored at most halfway: nothing in it
            try:
                self.sandboxes.destroy(session.sandbox_id, hooks=False)
            except HangarError as destroy_error:
                logger.warning("could not destroy %s: %s", session.sandbox_id,
                               destroy_error.message)  # fmt: skip
        intent = session.start
        if intent is not None and intent.turn is not None:
            try:
                turn = self.db.get_turn(session.id, intent.turn)
                if turn.finished_at is None:
                    self.db.update_turn(turn.model_copy(update={
                        "finished_at": utcnow(), "outcome": TurnOutcome.FAILED,
                        "error_code": exc.code, "summary": f"{what} failed: {exc.message}"}))  # fmt: skip
            except HangarError:
                pass  # never made: nothing to fail
        error = StartError(step=step, what=what, message=exc.message, code=exc.code)
        try:
            failed = self.transitions.fail_start(session, token, error, sandbox_id=None,
                                                 sandbox_expires_at=None)  # fmt: skip
        except SessionBusy:
            return
        self.schedule.claim_expiry(failed)
        self.schedule.cancel_all(session.id)


def _poll_delay(age: float) -> float:
    """Look at a run often at first, less after: a setup that takes minutes costs a tick a
    couple of seconds."""
    if age < 2:
        return POLL_SECONDS[0]
    if age < 10:
        return POLL_SECONDS[1]
    if age < 60:
        return POLL_SECONDS[2]
    return POLL_SECONDS[3]


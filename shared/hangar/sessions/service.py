"""The session service (spec 000 §5): new, send, open, wait, keep, suspend, archive, delete,
fork, patch, log and exec, over the ports.

Nothing lives in memory between calls: every state change is a compare-and-set on the session
record (:mod:`hangar.sessions.records`), and whoever wins a transition does the work that
follows it. A turn never runs inside a call: it runs detached in the sandbox and whoever looks
next (``wait``, a watch tick, ``get``) catches up with it and finishes it
(:mod:`hangar.sessions.turns`).

States: STARTING (a sandbox is being made, restored or a turn started), ACTIVE (a turn runs),
IDLE (a sandbox, no turn), SUSPENDING, SUSPENDED (no sandbox; checkpoints hold the work),
ARCHIVED (no sandbox, no checkpoints; turns and summaries kept), FAILED (the last start failed;
``send`` and ``open`` try again).

This module owns the lookups, the lifecycle transitions (new, send, open, keep, suspend,
archive, delete and the sandbox's pre-destroy hook) and the use of a session's sandbox (patch,
exec, shell leases). It delegates turns to :mod:`hangar.sessions.turns`, forks to
:mod:`hangar.sessions.forks`, ticks to :mod:`hangar.sessions.housekeeping` and making a sandbox
ready to :mod:`hangar.sessions.sandbox`. Two concurrent transitions of one session: exactly one
wins, the other gets SessionBusy; an action the session's state never allows: InvalidState.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import BinaryIO

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    CheckpointError,
    HangarError,
    InvalidInput,
    NotFound,
    SandboxError,
    SessionNotFound,
    VersionConflict,
)
from hangar.harnesses import get_harness
from hangar.keys import Keys
from hangar.models import (
    CheckpointReason,
    Session,
    SessionDetail,
    SessionState as S,
    TickDue,
    Turn,
    TurnOutcome,
    utcnow,
)
from hangar.sandboxes import HANGAR_TMP, Sandboxes, SandboxInfo, SandboxUser
from hangar.sessions.checkpoints import Checkpointer
from hangar.sessions.environments import Environments, check_name
from hangar.sessions.forks import Forks
from hangar.sessions.housekeeping import Housekeeping
from hangar.sessions.records import Records
from hangar.sessions.restore import Restorer
from hangar.sessions.sandbox import SESSION_LABEL, Provisioner, sandbox_alive, take_checkpoint
from hangar.sessions.turns import Turns, run_log_key
from hangar.sessions.workspace import repo_dir_for
from hangar.ticks import Ticks

# SESSION_LABEL is re-exported: the API reads a sandbox's owner by it.
__all__ = ["SESSION_LABEL", "SessionService"]

logger = logging.getLogger(__name__)

EXEC_TOUCH_SECONDS = 30.0


class SessionService:
    """Sessions over the ports. Construct once per process; register :meth:`handle_tick` with
    the ticker (``ticks.start(service.handle_tick)``)."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        blobs: Blobs,
        keys: Keys,
        sandboxes: Sandboxes,
        ticks: Ticks,
    ) -> None:
        self.settings = settings
        self.db = db
        self.blobs = blobs
        self.keys = keys
        self.sandboxes = sandboxes
        self.ticks = ticks
        self.environments = Environments(db, keys)
        self.checkpointer = Checkpointer(db, blobs, keys, sandboxes, settings)
        self.restorer = Restorer(db, blobs, keys, sandboxes, settings)
        self._records = Records(db)
        self._housekeeping = Housekeeping(
            settings, db, sandboxes, ticks, self.checkpointer, self._records,
            # Looked up when called: the turns are made below, and both are the service's.
            catch_up=lambda session: self._turns.catch_up(session),
            suspend=lambda ref: self.suspend(ref),
        )  # fmt: skip
        self._provisioner = Provisioner(
            settings, sandboxes, self.environments, self.restorer, self._records
        )
        self._turns = Turns(
            settings, db, blobs, keys, sandboxes, self.environments, self.checkpointer,
            self._records, self._provisioner, self._housekeeping,
        )  # fmt: skip
        self._forks = Forks(
            settings, db, sandboxes, self.environments, self.checkpointer, self.restorer,
            self._provisioner, self._records, self._turns, self._housekeeping,
        )  # fmt: skip
        sandboxes.add_pre_destroy_hook(self._before_destroy)

    # -- lookups ----------------------------------------------------------------------------

    def resolve(self, ref: str) -> Session:
        """A session by id or by name; SessionNotFound naming ``ref`` otherwise."""
        return self._records.resolve(ref)

    def get(self, ref: str) -> SessionDetail:
        """The session with its turns and checkpoints, caught up with a running turn."""
        session = self._turns.catch_up(self.resolve(ref))
        return SessionDetail(
            **session.model_dump(),
            turns=self.db.list_turns(session.id),
            checkpoints=self.db.list_checkpoints(session.id),
        )

    def list_sessions(self) -> list[Session]:
        """Every session, newest first."""
        return self.db.list_sessions()

    # -- starting work ----------------------------------------------------------------------

    def new(
        self,
        name: str,
        message: str,
        env: str,
        *,
        harness: str = "claude",
        model: str | None = None,
        title: str | None = None,
        idle_minutes: float | None = None,
    ) -> SessionDetail:
        """Create a session and start its first turn; returns once the turn runs. Everything is
        checked before anything is created (name, harness, environment, message)."""
        check_name("session", name)
        get_harness(harness)
        environment = self.environments.require(env)
        _check_message(message)
        if idle_minutes is not None and idle_minutes < 0:
            raise InvalidInput("idle minutes cannot be negative", idle_minutes=idle_minutes)
        session = self.db.create_session(
            Session(
                name=name,
                title=title or _title(message),
                environment=environment.name,
                harness=harness,
                model=model,
                repo=environment.repo,
                base_branch=environment.branch,
                idle_minutes=30 if idle_minutes is None else idle_minutes,
            )
        )
        self._turns.run(session, message)
        return self.get(session.id)

    def send(self, ref: str, message: str) -> Turn:
        """Start the next turn (resuming the session first when it is suspended). Exactly one of
        two concurrent sends wins; the other gets SessionBusy."""
        _check_message(message)
        session = self._turns.catch_up(self.resolve(ref))
        session = self._records.claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "send a message")
        return self._turns.run(session, message)

    def open(self, ref: str) -> SessionDetail:
        """Make sure the session has a sandbox with its work restored; returns it IDLE (or
        still ACTIVE when a turn runs)."""
        session = self._turns.catch_up(self.resolve(ref))
        if session.state in (S.IDLE, S.ACTIVE) and sandbox_alive(self.sandboxes, session):
            self._touch(session.id)
            return self.get(session.id)
        session = self._records.claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "open")
        try:
            session = self._provisioner.ensure(session)
        except HangarError as exc:
            self._records.fail(session, exc)
            raise
        self._records.update(session.id, state=S.IDLE, last_active_at=utcnow())
        self._housekeeping.schedule_housekeeping(self.resolve(session.id))
        return self.get(session.id)

    def keep(self, ref: str, idle_minutes: float) -> Session:
        """Set the idle timeout (0: never suspend for idleness)."""
        if idle_minutes < 0:
            raise InvalidInput("idle minutes cannot be negative", idle_minutes=idle_minutes)
        session = self._records.update(self.resolve(ref).id, idle_minutes=idle_minutes)
        self._housekeeping.schedule_idle(session)
        return session

    # -- turns (hangar.sessions.turns) ------------------------------------------------------

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
        return self._turns.wait(ref, n, timeout=timeout, on_output=on_output, poll=poll)

    def log(self, ref: str, n: int | None = None) -> bytes:
        """A turn's run log (default: the latest turn): live while it runs, stored after."""
        return self._turns.log(ref, n)

    # -- losing the sandbox: the pre-destroy hook, suspend, archive, delete -----------------

    def _before_destroy(self, info: SandboxInfo) -> None:
        """The pre-destroy hook: a session losing its sandbox any other way than by suspend is
        checkpointed first (reason ``destroy``) and becomes SUSPENDED. A checkpoint that fails
        raises, which vetoes the destroy (unless forced, when the session is settled then): no
        work goes with a sandbox unless someone chose to lose it."""
        self._settle_before_destroy(info)

    def destroy_sandbox(self, sandbox_id: str, *, force: bool = False) -> None:
        """Destroy a sandbox by hand, through the pre-destroy hook: DestroyVetoed when its
        session's checkpoint fails, unless ``force``; a forced destroy still leaves the session
        SUSPENDED (to resume from its last good checkpoint), never pointing at a sandbox that
        is gone."""
        info = self.sandboxes.get(sandbox_id)
        self.sandboxes.destroy(sandbox_id, force=force)
        session_id = info.labels.get(SESSION_LABEL)
        if not session_id:
            return
        try:
            session = self.db.get_session(session_id)
        except SessionNotFound:
            return
        if session.sandbox_id == sandbox_id:
            self._lose_sandbox(session)

    def replace_outdated_sandboxes(self) -> list[str]:
        """Checkpoint (reason ``destroy``) and destroy every sandbox made by an older, weaker
        layout of the backend (``hangar serve`` calls this at start); each session loses its
        sandbox to SUSPENDED, and its next use makes a current one. A sandbox whose checkpoint
        fails is kept (its work must not be lost) and logged. Returns those destroyed."""
        replaced = []
        for info in self.sandboxes.list():
            if not info.outdated:
                continue
            try:
                self._settle_before_destroy(info)
            except HangarError as exc:
                logger.error("sandbox %s is of an older layout, but its checkpoint failed, so "
                             "it is kept: %s", info.id, exc.message)  # fmt: skip
                continue
            self.sandboxes.destroy(info.id, hooks=False)
            replaced.append(info.id)
        return replaced

    def _settle_before_destroy(self, info: SandboxInfo) -> None:
        """A session losing sandbox ``info`` any other way than by suspend: checkpoint it
        (reason ``destroy``), interrupt its running turn, make it SUSPENDED. A failed checkpoint
        raises CheckpointError, and nothing else changes but the session's
        ``checkpoint_error``."""
        session_id = info.labels.get(SESSION_LABEL)
        if not session_id:
            return
        try:
            session = self.db.get_session(session_id)
        except SessionNotFound:
            return
        if session.sandbox_id != info.id or session.state is S.SUSPENDING:
            return
        take_checkpoint(self.checkpointer, self._records, session, CheckpointReason.DESTROY)
        self._lose_sandbox(session)

    def _lose_sandbox(self, session: Session) -> None:
        """The session's sandbox is going: its running turn is interrupted, it is SUSPENDED."""
        running = [t for t in self.db.list_turns(session.id) if t.finished_at is None]
        for turn in running:
            try:
                self.db.update_turn(turn.model_copy(update={
                    "finished_at": utcnow(), "outcome": TurnOutcome.INTERRUPTED,
                    "summary": "the sandbox was destroyed during the turn"}))  # fmt: skip
            except VersionConflict:
                pass  # finished meanwhile by whoever caught up with it
        self._records.update(session.id, state=S.SUSPENDED, sandbox_id=None,
                             sandbox_expires_at=None)  # fmt: skip
        self._housekeeping.cancel_watch(session.id)

    def suspend(self, ref: str) -> Session:
        """Checkpoint, destroy the sandbox, SUSPENDED. A checkpoint that fails leaves the
        session IDLE with its sandbox (nothing is destroyed without a checkpoint)."""
        session = self._turns.catch_up(self.resolve(ref))
        if session.state is S.SUSPENDED:
            return session
        session = self._records.claim(session, (S.IDLE,), "suspend", to=S.SUSPENDING)
        if session.sandbox_id:
            try:
                take_checkpoint(self.checkpointer, self._records, session,
                                CheckpointReason.SUSPEND)  # fmt: skip
            except CheckpointError as exc:
                self._records.update(session.id, state=S.IDLE, error=exc.message)
                raise
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        return self._records.update(session.id, state=S.SUSPENDED, sandbox_id=None,
                                    sandbox_expires_at=None)  # fmt: skip

    def archive(self, ref: str) -> Session:
        """Drop the sandbox and the checkpoints; keep the record, its turns and summaries."""
        session = self._turns.catch_up(self.resolve(ref))
        session = self._records.claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "archive",
                                      to=S.SUSPENDING)  # fmt: skip
        if session.sandbox_id:
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        self.checkpointer.drop_all(session.id)
        self._housekeeping.cancel_ticks(session.id)
        return self._records.update(session.id, state=S.ARCHIVED, sandbox_id=None,
                                    sandbox_expires_at=None)  # fmt: skip

    def delete(self, ref: str) -> None:
        """Delete the session with its sandbox, checkpoints, turns and stored logs."""
        session = self.resolve(ref)
        if session.sandbox_id:
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        self.checkpointer.drop_all(session.id)
        for turn in self.db.list_turns(session.id):
            self.blobs.delete(run_log_key(session.id, turn.n))
        self._housekeeping.cancel_ticks(session.id)
        self.db.delete_session(session.id)

    # -- forks (hangar.sessions.forks) ------------------------------------------------------

    def fork(self, ref: str, n: int) -> list[Session]:
        """Restore one checkpoint of the session into ``n`` new sessions; the first turn of
        each forks the conversation with the harness's fork flag (or hands off)."""
        return self._forks.fork(ref, n)

    # -- using the sandbox ------------------------------------------------------------------

    def patch(self, ref: str) -> bytes:
        """The session's change, base to working tree with untracked files: live from the
        sandbox when there is one, else from the newest checkpoint that has it."""
        session = self._turns.catch_up(self.resolve(ref))
        if session.sandbox_id and sandbox_alive(self.sandboxes, session):
            config = {"repo": repo_dir_for(session.repo or ""), "base": session.base_commit,
                      "max_patch": self.settings.max_patch_bytes, "mode": "patch",
                      "tmp": HANGAR_TMP}  # fmt: skip
            result = self.sandboxes.exec(session.sandbox_id,
                                         agent.command("checkpoint", json.dumps(config)),
                                         user=SandboxUser.HANGAR)  # fmt: skip
            if not result.ok:
                raise SandboxError(f"cannot make the patch: {result.stderr.decode(errors='replace').strip()}")
            self._touch(session.id)
            return result.stdout
        for checkpoint in reversed(self.db.list_checkpoints(session.id)):
            if checkpoint.part("session.patch"):
                return b"".join(self.checkpointer.parts.read(checkpoint, "session.patch"))
        raise NotFound(f"session {session.name} has no patch to show", session=session.name)

    def exec(
        self,
        ref: str,
        argv: list[str],
        *,
        stdin: bytes | BinaryIO | Iterator[bytes] | None = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        timeout: float | None = None,
    ) -> int:
        """Run a command in the session's repo folder, opening the session first if needed.
        Counts as activity for as long as it runs. Returns its exit status."""
        if not argv:
            raise InvalidInput("exec needs a command")
        session = self.resolve(ref)
        if not sandbox_alive(self.sandboxes, session) or session.state not in (S.IDLE, S.ACTIVE):
            self.open(ref)
            session = self.resolve(ref)
        assert session.sandbox_id is not None
        env = self.environments.require(session.environment)
        with self.shell_lease(session.id):
            result = self.sandboxes.exec(
                session.sandbox_id, argv, stdin=stdin, stdout=stdout, stderr=stderr,
                env=env.vars, cwd=repo_dir_for(session.repo or ""), timeout=timeout,
            )  # fmt: skip
        return result.exit_code

    @contextlib.contextmanager
    def shell_lease(self, session_id: str) -> Iterator[None]:
        """Hold an open-shell lease on the session while the block runs (a shell or terminal):
        the session is in use, so it never suspends for idleness meanwhile. The lease is
        refreshed every EXEC_TOUCH_SECONDS and expires by itself if this process dies."""
        lease = uuid.uuid4().hex[:12]
        stop = threading.Event()

        def hold() -> None:
            expiry = utcnow() + timedelta(seconds=2 * EXEC_TOUCH_SECONDS)
            session = self.db.get_session(session_id)
            shells = {k: v for k, v in session.shells.items() if v > utcnow()}
            self._touch(session_id, shells={**shells, lease: expiry})

        def keep_holding() -> None:
            while not stop.wait(EXEC_TOUCH_SECONDS):
                hold()

        hold()
        keeper = threading.Thread(target=keep_holding, daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()
            session = self.db.get_session(session_id)
            rest = {k: v for k, v in session.shells.items() if k != lease and v > utcnow()}
            self._touch(session_id, shells=rest)

    def _touch(self, session_id: str, **changes: object) -> None:
        """Record use through hangar (activity), extending the sandbox's TTL."""
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        session = self._records.update(session_id, last_active_at=utcnow(),
                                       sandbox_expires_at=utcnow() + ttl, **changes)  # fmt: skip
        self._housekeeping.schedule_idle(session)

    # -- housekeeping (hangar.sessions.housekeeping) ----------------------------------------

    def handle_tick(self, due: TickDue) -> None:
        """Deliver a tick: ``watch`` (catch up with a running turn), ``idle`` (suspend an unused
        session), ``interval`` (checkpoint if something changed), ``reap`` (destroy expired
        sandboxes). Ticks are hints: each re-reads state and does only what is still due."""
        self._housekeeping.handle_tick(due)

    def reap(self) -> list[str]:
        """Destroy every sandbox whose session's TTL has passed (not during a turn), each
        through the pre-destroy hook, concurrently. Returns the destroyed sandboxes' ids."""
        return self._housekeeping.reap()


def _title(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _check_message(message: str) -> None:
    if not message.strip():
        raise InvalidInput("the message is empty")

"""The session service (spec 000 §5): new, send, open, wait, keep, suspend, archive, delete,
fork, patch, log and exec, over the ports.

Nothing lives in memory between calls: every state change is a compare-and-set on the session
record, and whoever wins a transition does the work that follows it. A turn never runs inside a
call: it runs detached in the sandbox (:mod:`hangar.harnesses.runs`) and whoever looks next
(``wait``, a watch tick, ``get``) catches up with it and finishes it.

States: STARTING (a sandbox is being made, restored or a turn started), ACTIVE (a turn runs),
IDLE (a sandbox, no turn), SUSPENDING, SUSPENDED (no sandbox; checkpoints hold the work),
ARCHIVED (no sandbox, no checkpoints; turns and summaries kept), FAILED (the last start failed;
``send`` and ``open`` try again).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import BinaryIO

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    CheckpointError,
    HangarError,
    InvalidInput,
    InvalidState,
    NotFound,
    SandboxError,
    SandboxNotFound,
    SessionBusy,
    SessionNotFound,
    VersionConflict,
)
from hangar.harnesses import Harness, TurnSpec, get_harness
from hangar.harnesses.handoff import TurnRecord, handoff_prompt
from hangar.harnesses.runs import read_run
from hangar.harnesses.turns import start_turn, turn_result
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import (
    Checkpoint,
    CheckpointReason,
    Session,
    SessionDetail,
    SessionState as S,
    TickDue,
    Turn,
    TurnOutcome,
    utcnow,
)
from hangar.sandboxes import HOME, SandboxInfo, Sandboxes, SandboxSpec
from hangar.sessions.checkpoints import Checkpointer, CheckpointTarget
from hangar.sessions.environments import Environments, check_name
from hangar.sessions.restore import Restorer
from hangar.sessions.workspace import clone, repo_dir_for
from hangar.ticks import Ticks

logger = logging.getLogger(__name__)

SESSION_LABEL = "hangar.session"
WATCH_SECONDS = 2.0
REAP_SECONDS = 60.0
EXEC_TOUCH_SECONDS = 30.0
MAX_LOG_BYTES = 50 << 20


def _log_key(session_id: str, n: int) -> str:
    return f"sessions/{session_id}/turns/{n}/log"


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
        sandboxes.add_pre_destroy_hook(self._before_destroy)

    # -- lookups ----------------------------------------------------------------------------

    def resolve(self, ref: str) -> Session:
        """A session by id or by name; SessionNotFound naming ``ref`` otherwise."""
        if ref.startswith("ses-"):
            try:
                return self.db.get_session(ref)
            except SessionNotFound:
                pass
        try:
            return self.db.find_session(ref)
        except SessionNotFound:
            raise SessionNotFound(f"no session {ref!r}", ref=ref) from None

    def get(self, ref: str) -> SessionDetail:
        """The session with its turns and checkpoints, caught up with a running turn."""
        session = self._catch_up(self.resolve(ref))
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
        self._run_turn(session, message)
        return self.get(session.id)

    def send(self, ref: str, message: str) -> Turn:
        """Start the next turn (resuming the session first when it is suspended). Exactly one of
        two concurrent sends wins; the other gets SessionBusy."""
        _check_message(message)
        session = self._catch_up(self.resolve(ref))
        session = self._claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "send a message")
        return self._run_turn(session, message)

    def open(self, ref: str) -> SessionDetail:
        """Make sure the session has a sandbox with its work restored; returns it IDLE (or
        still ACTIVE when a turn runs)."""
        session = self._catch_up(self.resolve(ref))
        if session.state in (S.IDLE, S.ACTIVE) and self._sandbox_alive(session):
            self._touch(session.id)
            return self.get(session.id)
        session = self._claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "open")
        try:
            session = self._ensure_sandbox(session)
        except HangarError as exc:
            self._fail(session, exc)
            raise
        self._update(session.id, state=S.IDLE, last_active_at=utcnow())
        self._schedule_housekeeping(self.resolve(session.id))
        return self.get(session.id)

    def keep(self, ref: str, idle_minutes: float) -> Session:
        """Set the idle timeout (0: never suspend for idleness)."""
        if idle_minutes < 0:
            raise InvalidInput("idle minutes cannot be negative", idle_minutes=idle_minutes)
        session = self._update(self.resolve(ref).id, idle_minutes=idle_minutes)
        self._schedule_idle(session)
        return session

    # -- turns ------------------------------------------------------------------------------

    def _run_turn(self, session: Session, message: str) -> Turn:
        """With the session claimed (STARTING), get a sandbox and start the turn detached."""
        try:
            session = self._ensure_sandbox(session)
        except HangarError as exc:
            self._fail(session, exc)
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
            self._update(session.id, state=S.IDLE, error=exc.message)
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        self._update(
            session.id,
            state=S.ACTIVE,
            needs_input=None,
            error=None,
            last_active_at=utcnow(),
            sandbox_expires_at=utcnow() + ttl,
        )
        self.ticks.schedule(f"watch:{session.id}", "watch", _later(WATCH_SECONDS),
                            {"session": session.id})  # fmt: skip
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
        session = self.resolve(ref)
        deadline = time.monotonic() + timeout
        cursor = 0
        while True:
            session = self._catch_up(self.db.get_session(session.id))
            turn = self._turn(session.id, n)
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

    def _turn(self, session_id: str, n: int | None) -> Turn:
        turns = self.db.list_turns(session_id)
        if not turns:
            raise NotFound(f"session {session_id} has no turns", session_id=session_id)
        if n is None:
            return turns[-1]
        return self.db.get_turn(session_id, n)

    def _catch_up(self, session: Session) -> Session:
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
                return self.db.get_session(session.id)  # the pre-destroy hook settles it
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
            self.checkpointer.take(self._target(session), CheckpointReason.TURN)
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
        try:
            updated = self.db.update_session(
                self.db.get_session(session.id).model_copy(update=changes)
            )
        except VersionConflict:
            return self.db.get_session(session.id)
        self.ticks.cancel(f"watch:{session.id}")
        self._schedule_housekeeping(updated)
        return updated

    def _store_log(self, session_id: str, n: int, log: bytes) -> str:
        data_key = new_data_key()
        aad = _log_key(session_id, n).encode()
        self.blobs.put(_log_key(session_id, n), seal(data_key, aad, [log[:MAX_LOG_BYTES]]))
        return base64.b64encode(self.keys.wrap(data_key)).decode()

    def log(self, ref: str, n: int | None = None) -> bytes:
        """A turn's run log (default: the latest turn): live while it runs, stored after."""
        session = self.resolve(ref)
        turn = self._turn(session.id, n)
        if turn.log_key:
            data_key = self.keys.unwrap(base64.b64decode(turn.log_key))
            aad = _log_key(session.id, turn.n).encode()
            with self.blobs.open(_log_key(session.id, turn.n)) as stream:
                return b"".join(unseal(data_key, aad, stream))
        if session.sandbox_id:
            try:
                return read_run(self.sandboxes, session.sandbox_id, turn.run_id, 0, MAX_LOG_BYTES).data
            except (SandboxError, SandboxNotFound):
                pass
        return b""

    # -- sandboxes --------------------------------------------------------------------------

    def _target(self, session: Session) -> CheckpointTarget:
        assert session.sandbox_id is not None
        return CheckpointTarget(
            session_id=session.id,
            sandbox_id=session.sandbox_id,
            repo_dir=repo_dir_for(session.repo or ""),
            base=session.base_commit,
            harness=session.harness,
            harness_session=session.harness_session,
            conversation_dirs=get_harness(session.harness).conversation_dirs,
        )

    def _sandbox_alive(self, session: Session) -> bool:
        if not session.sandbox_id:
            return False
        try:
            self.sandboxes.get(session.sandbox_id)
        except SandboxNotFound:
            return False
        return True

    def _ensure_sandbox(self, session: Session) -> Session:
        """A live sandbox for a claimed session: made, cloned, set up and restored if needed."""
        if self._sandbox_alive(session):
            return session
        env = self.environments.require(session.environment)
        ro_paths = [env.repo] if env.repo.startswith("/") else []
        info = self.sandboxes.create(
            SandboxSpec(labels={SESSION_LABEL: session.id}, ro_paths=ro_paths)
        )
        try:
            workspace = clone(
                self.sandboxes, info.id, env.repo, work_branch=session.branch, branch=env.branch
            )
            turn_env = self.environments.turn_env(env)
            if env.setup:
                result = self.sandboxes.exec(
                    info.id, ["bash", "-lc", env.setup], cwd=workspace.repo_dir, env=turn_env,
                    timeout=self.settings.setup_timeout_minutes * 60,
                )  # fmt: skip
                if not result.ok:
                    detail = result.stderr.decode(errors="replace").strip()[-1000:]
                    raise SandboxError(f"the environment's setup failed: {detail}",
                                       exit_code=result.exit_code)  # fmt: skip
            report = self.restorer.restore(session.id, info.id, workspace.repo_dir, home=HOME)
        except HangarError:
            self.sandboxes.destroy(info.id, hooks=False)
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        return self._update(
            session.id,
            sandbox_id=info.id,
            sandbox_expires_at=utcnow() + ttl,
            base_commit=session.base_commit or workspace.base_commit,
            base_branch=session.base_branch or workspace.base_branch,
            restored_from=report.checkpoint.id if report else None,
        )

    def _before_destroy(self, info: SandboxInfo) -> None:
        """The pre-destroy hook: a session losing its sandbox any other way than by suspend is
        checkpointed first (reason ``destroy``) and becomes SUSPENDED."""
        session_id = info.labels.get(SESSION_LABEL)
        if not session_id:
            return
        try:
            session = self.db.get_session(session_id)
        except SessionNotFound:
            return
        if session.sandbox_id != info.id or session.state is S.SUSPENDING:
            return
        try:
            self.checkpointer.take(self._target(session), CheckpointReason.DESTROY)
        except CheckpointError:
            logger.exception("checkpoint before destroying %s failed", info.id)
        running = [t for t in self.db.list_turns(session.id) if t.finished_at is None]
        for turn in running:
            self.db.update_turn(turn.model_copy(update={
                "finished_at": utcnow(), "outcome": TurnOutcome.INTERRUPTED,
                "summary": "the sandbox was destroyed during the turn"}))  # fmt: skip
        self._update(session.id, state=S.SUSPENDED, sandbox_id=None, sandbox_expires_at=None)
        self.ticks.cancel(f"watch:{session.id}")

    # -- suspend, archive, delete, fork -----------------------------------------------------

    def suspend(self, ref: str) -> Session:
        """Checkpoint, destroy the sandbox, SUSPENDED. A checkpoint that fails leaves the
        session IDLE with its sandbox (nothing is destroyed without a checkpoint)."""
        session = self._catch_up(self.resolve(ref))
        if session.state is S.SUSPENDED:
            return session
        session = self._claim(session, (S.IDLE,), "suspend", to=S.SUSPENDING)
        if session.sandbox_id:
            try:
                self.checkpointer.take(self._target(session), CheckpointReason.SUSPEND)
            except CheckpointError as exc:
                self._update(session.id, state=S.IDLE, error=exc.message)
                raise
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        return self._update(session.id, state=S.SUSPENDED, sandbox_id=None,
                            sandbox_expires_at=None)  # fmt: skip

    def archive(self, ref: str) -> Session:
        """Drop the sandbox and the checkpoints; keep the record, its turns and summaries."""
        session = self._catch_up(self.resolve(ref))
        session = self._claim(session, (S.IDLE, S.SUSPENDED, S.FAILED), "archive",
                              to=S.SUSPENDING)  # fmt: skip
        if session.sandbox_id:
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        self.checkpointer.drop_all(session.id)
        self._cancel_ticks(session.id)
        return self._update(session.id, state=S.ARCHIVED, sandbox_id=None,
                            sandbox_expires_at=None)  # fmt: skip

    def delete(self, ref: str) -> None:
        """Delete the session with its sandbox, checkpoints, turns and stored logs."""
        session = self.resolve(ref)
        if session.sandbox_id:
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        self.checkpointer.drop_all(session.id)
        for turn in self.db.list_turns(session.id):
            self.blobs.delete(_log_key(session.id, turn.n))
        self._cancel_ticks(session.id)
        self.db.delete_session(session.id)

    def fork(self, ref: str, n: int) -> list[Session]:
        """Restore one checkpoint of the session into ``n`` new sessions; the first turn of
        each forks the conversation with the harness's fork flag (or hands off)."""
        if not 1 <= n <= 10:
            raise InvalidInput("fork makes between 1 and 10 sessions", n=n)
        source = self._catch_up(self.resolve(ref))
        if source.state is S.ACTIVE:
            raise SessionBusy(f"session {source.name} is running a turn", session=source.name)
        checkpoint = self._fork_point(source)
        forks = []
        for _ in range(n):
            forks.append(self._fork_one(source, checkpoint))
        return forks

    def _fork_point(self, source: Session) -> Checkpoint:
        if source.state is S.IDLE and self._sandbox_alive(source):
            taken = self.checkpointer.take(self._target(source), CheckpointReason.MANUAL)
            if taken is not None:
                return taken
        checkpoints = self.db.list_checkpoints(source.id)
        if not checkpoints:
            raise InvalidState(f"session {source.name} has no checkpoint to fork from",
                               session=source.name)  # fmt: skip
        return checkpoints[-1]

    def _fork_one(self, source: Session, checkpoint: Checkpoint) -> Session:
        k = 1
        taken = {s.name for s in self.db.list_sessions()}
        stem = source.name[:52].rstrip("-")  # room for "-fork-k" within the name limit
        while f"{stem}-fork-{k}" in taken:
            k += 1
        fork = self.db.create_session(
            Session(
                name=f"{stem}-fork-{k}",
                title=f"{source.title} (fork {k})",
                environment=source.environment,
                harness=source.harness,
                model=source.model,
                repo=source.repo,
                base_branch=source.base_branch,
                branch=source.branch,
                base_commit=source.base_commit,
                fork_from=source.harness_session,
                idle_minutes=source.idle_minutes,
            )
        )
        try:
            env = self.environments.require(fork.environment)
            info = self.sandboxes.create(
                SandboxSpec(labels={SESSION_LABEL: fork.id},
                            ro_paths=[env.repo] if env.repo.startswith("/") else [])  # fmt: skip
            )
            fork = self._update(fork.id, sandbox_id=info.id)
            workspace = clone(self.sandboxes, info.id, env.repo, work_branch=fork.branch,
                              branch=env.branch)  # fmt: skip
            self.restorer.restore_checkpoint(checkpoint, info.id, workspace.repo_dir)
            self.checkpointer.take(self._target(fork), CheckpointReason.MANUAL)
        except HangarError as exc:
            self._fail(fork, exc)
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        fork = self._update(fork.id, state=S.IDLE, restored_from=checkpoint.id,
                            last_active_at=utcnow(), sandbox_expires_at=utcnow() + ttl)  # fmt: skip
        self._schedule_housekeeping(fork)
        return fork

    # -- using the sandbox ------------------------------------------------------------------

    def patch(self, ref: str) -> bytes:
        """The session's change, base to working tree with untracked files: live from the
        sandbox when there is one, else from the newest checkpoint that has it."""
        session = self._catch_up(self.resolve(ref))
        if session.sandbox_id and self._sandbox_alive(session):
            config = {"repo": repo_dir_for(session.repo or ""), "base": session.base_commit,
                      "max_patch": self.settings.max_patch_bytes, "mode": "patch"}  # fmt: skip
            result = self.sandboxes.exec(session.sandbox_id,
                                         agent.command("checkpoint", json.dumps(config)))  # fmt: skip
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
        if not self._sandbox_alive(session) or session.state not in (S.IDLE, S.ACTIVE):
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

    # -- housekeeping -----------------------------------------------------------------------

    def handle_tick(self, due: TickDue) -> None:
        """Deliver a tick: ``watch`` (catch up with a running turn), ``idle`` (suspend an unused
        session), ``interval`` (checkpoint if something changed), ``reap`` (destroy expired
        sandboxes). Ticks are hints: each re-reads state and does only what is still due."""
        if due.kind == "reap":
            self.reap()
            self.ticks.schedule("reap", "reap", _later(REAP_SECONDS))
            return
        try:
            session = self.db.get_session(str(due.payload.get("session")))
        except SessionNotFound:
            return
        if due.kind == "watch":
            session = self._catch_up(session)
            if session.state is S.ACTIVE:
                ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
                self._update(session.id, sandbox_expires_at=utcnow() + ttl)
                self.ticks.schedule(due.key, "watch", _later(WATCH_SECONDS), due.payload)
        elif due.kind == "idle":
            self._idle_check(session)
        elif due.kind == "interval":
            self._interval_checkpoint(session)

    def _idle_check(self, session: Session) -> None:
        if session.state is not S.IDLE or not session.sandbox_id or session.idle_minutes == 0:
            return
        quiet_until = self._idle_due(session)
        leases = [expiry for expiry in session.shells.values() if expiry > utcnow()]
        if leases:
            quiet_until = max(quiet_until, *leases)
        if utcnow() < quiet_until:
            self.ticks.schedule(f"idle:{session.id}", "idle", quiet_until, {"session": session.id})
            return
        try:
            self.suspend(session.id)
        except (SessionBusy, InvalidState):
            pass  # someone used it meanwhile; their activity reschedules

    def _idle_due(self, session: Session) -> datetime:
        idle = timedelta(minutes=session.idle_minutes)
        grace = timedelta(seconds=self.settings.activity_grace_seconds)
        return session.last_active_at + max(idle, grace)

    def _interval_checkpoint(self, session: Session) -> None:
        if session.state not in (S.IDLE, S.ACTIVE) or not self._sandbox_alive(session):
            return
        try:
            self.checkpointer.take(self._target(session), CheckpointReason.INTERVAL,
                                   skip_if_unchanged=True)  # fmt: skip
        except CheckpointError as exc:
            logger.warning("interval checkpoint of %s failed: %s", session.id, exc.message)
        self._schedule_interval(session)

    def reap(self) -> list[str]:
        """Destroy every sandbox whose session's TTL has passed (not during a turn), each
        through the pre-destroy hook, concurrently. Returns the destroyed sandboxes' ids."""
        now = utcnow()
        doomed = [
            s.sandbox_id
            for s in self.db.list_sessions(states=[S.IDLE])
            if s.sandbox_id and s.sandbox_expires_at and s.sandbox_expires_at <= now
        ]
        threads = [threading.Thread(target=self.sandboxes.destroy, args=(sid,)) for sid in doomed]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [sid for sid in doomed if sid]

    def _schedule_housekeeping(self, session: Session) -> None:
        self._schedule_idle(session)
        self._schedule_interval(session)
        self.ticks.schedule("reap", "reap", _later(REAP_SECONDS))

    def _schedule_idle(self, session: Session) -> None:
        key = f"idle:{session.id}"
        if session.idle_minutes == 0 or session.state not in (S.IDLE, S.ACTIVE):
            self.ticks.cancel(key)
            return
        self.ticks.schedule(key, "idle", self._idle_due(session), {"session": session.id})

    def _schedule_interval(self, session: Session) -> None:
        minutes = self.settings.session_checkpoint_minutes
        if minutes > 0:
            self.ticks.schedule(f"interval:{session.id}", "interval",
                                _later(minutes * 60), {"session": session.id})  # fmt: skip

    def _cancel_ticks(self, session_id: str) -> None:
        for kind in ("watch", "idle", "interval"):
            self.ticks.cancel(f"{kind}:{session_id}")

    # -- records ----------------------------------------------------------------------------

    def _claim(
        self, session: Session, allowed: tuple[S, ...], action: str, to: S = S.STARTING
    ) -> Session:
        """Move the session to ``to`` if it is in an ``allowed`` state, compare-and-set: of two
        callers racing for it, exactly one wins and the other gets SessionBusy."""
        if session.state not in allowed:
            if session.state in (S.ACTIVE, S.STARTING, S.SUSPENDING):
                raise SessionBusy(
                    f"session {session.name} is busy ({session.state.value}); try again when "
                    "its turn has finished",
                    session=session.name,
                    state=session.state.value,
                )
            raise InvalidState(f"cannot {action} a session that is {session.state.value}",
                               session=session.name, state=session.state.value)  # fmt: skip
        try:
            return self.db.update_session(
                session.model_copy(update={"state": to, "updated_at": utcnow()})
            )
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile; it is busy",
                              session=session.name) from None  # fmt: skip

    def _update(self, session_id: str, **changes: object) -> Session:
        """Apply ``changes`` to the current record, retrying on a concurrent change."""
        for _ in range(20):
            current = self.db.get_session(session_id)
            try:
                return self.db.update_session(
                    current.model_copy(update={**changes, "updated_at": utcnow()})
                )
            except VersionConflict:
                continue
        raise SessionBusy(f"session {session_id} keeps changing", session=session_id)

    def _touch(self, session_id: str, **changes: object) -> None:
        """Record use through hangar (activity), extending the sandbox's TTL."""
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        session = self._update(session_id, last_active_at=utcnow(),
                               sandbox_expires_at=utcnow() + ttl, **changes)  # fmt: skip
        self._schedule_idle(session)

    def _fail(self, session: Session, exc: HangarError) -> None:
        self._update(session.id, state=S.FAILED, error=exc.message)


def _later(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


def _title(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _check_message(message: str) -> None:
    if not message.strip():
        raise InvalidInput("the message is empty")

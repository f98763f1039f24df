"""A session's sandbox: the label that ties a sandbox to its session, whether the session's
sandbox is alive, where a checkpoint of it looks, and making one ready for a claimed session.

Contracts: a session owns at most one sandbox, named by ``session.sandbox_id`` and labelled
``SESSION_LABEL=<session id>`` (the pre-destroy hook finds the session by that label).
:meth:`Provisioner.ensure` is idempotent for a session whose sandbox is alive (it returns the
session unchanged); otherwise it creates, clones, runs the environment's setup and restores the
newest usable checkpoint, and on any HangarError destroys the new sandbox without hooks and
re-raises, so a failed start leaves no sandbox behind. It must be called with the session
claimed (see :meth:`hangar.sessions.records.Records.claim`).
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from hangar.config import Settings
from hangar.errors import CheckpointError, HangarError, SandboxError, SandboxNotFound
from hangar.harnesses import get_harness
from hangar.harnesses.runs import read_stderr, start_run, stop_run, wait_run
from hangar.models import Checkpoint, CheckpointReason, Session, SkippedCheckpoint, utcnow
from hangar.sandboxes import HOME, SandboxInfo, Sandboxes, SandboxSpec
from hangar.sessions.checkpoints import Checkpointer, CheckpointTarget
from hangar.sessions.environments import Environments
from hangar.sessions.records import Records
from hangar.sessions.restore import Restorer
from hangar.sessions.workspace import Workspace, clone, repo_dir_for

SESSION_LABEL = "hangar.session"


def checkpoint_target(session: Session) -> CheckpointTarget:
    """What a checkpoint of the session's sandbox covers; the session must have a sandbox."""
    assert session.sandbox_id is not None
    return CheckpointTarget(
        session_id=session.id,
        sandbox_id=session.sandbox_id,
        repo_dir=repo_dir_for(session.repo or ""),
        base=session.base_commit,
        harness=session.harness,
        harness_session=session.harness_session,
        conversation_dirs=get_harness(session.harness).conversation_dirs,
        exchange_dir=exchange_dir(session),
    )


def take_checkpoint(
    checkpointer: Checkpointer,
    records: Records,
    session: Session,
    reason: CheckpointReason,
    *,
    skip_if_unchanged: bool = False,
) -> Checkpoint | None:
    """Checkpoint the session's sandbox and keep the outcome on the session: a failure is its
    ``checkpoint_error`` (and is re-raised), a success clears it."""
    try:
        taken = checkpointer.take(checkpoint_target(session), reason,
                                  skip_if_unchanged=skip_if_unchanged)  # fmt: skip
    except CheckpointError as exc:
        records.update(session.id, checkpoint_error=f"{reason.value} checkpoint failed: "
                       f"{exc.message}")  # fmt: skip
        raise
    if session.checkpoint_error:
        records.update(session.id, checkpoint_error=None)
    return taken


def exchange_dir(session: Session) -> str:
    """The session's exchange folder ($HANGAR_IO), relative to HOME: checkpointed as a part of
    its own, so what the agent hands back never crowds the conversation out of its cap."""
    return f".hangar/sessions/{session.name}"


def sandbox_alive(sandboxes: Sandboxes, session: Session) -> bool:
    """Whether the session names a sandbox and that sandbox still exists."""
    if not session.sandbox_id:
        return False
    try:
        sandboxes.get(session.sandbox_id)
    except SandboxNotFound:
        return False
    return True


class Provisioner:
    """Makes a claimed session's sandbox ready: created, cloned, set up and restored."""

    def __init__(
        self,
        settings: Settings,
        sandboxes: Sandboxes,
        environments: Environments,
        restorer: Restorer,
        records: Records,
    ) -> None:
        self.settings = settings
        self.sandboxes = sandboxes
        self.environments = environments
        self.restorer = restorer
        self.records = records

    def prepare(self, session: Session) -> tuple[SandboxInfo, Workspace]:
        """A new sandbox for the session: made, the repo cloned on the session's branch, and
        the environment's setup run in it. Nothing is restored and no record changes. On any
        failure the sandbox is destroyed and the HangarError raised."""
        env = self.environments.require(session.environment)
        ro_paths = [env.repo] if env.repo.startswith("/") else []
        info = self.sandboxes.create(SandboxSpec(labels={SESSION_LABEL: session.id},
                                                 ro_paths=ro_paths, host_ports=env.host_ports))
        try:
            workspace = clone(
                self.sandboxes, info.id, env.repo, work_branch=session.branch, branch=env.branch
            )
            if env.setup:
                self._setup(info.id, env.setup, workspace.repo_dir,
                            self.environments.turn_env(env))  # fmt: skip
        except HangarError:
            self.sandboxes.destroy(info.id, hooks=False)
            raise
        return info, workspace

    def _setup(self, sandbox_id: str, command: str, repo_dir: str, env: dict[str, str]) -> None:
        """Run the environment's setup as the agent, as a detached run: its variables and
        secrets reach it through a file of hangar's, never a command line."""
        run_id = f"setup-{secrets.token_hex(4)}"
        timeout = self.settings.setup_timeout_minutes * 60
        start_run(self.sandboxes, sandbox_id, run_id, ["bash", "-lc", command], cwd=repo_dir,
                  env=env)  # fmt: skip
        try:
            _, code = wait_run(self.sandboxes, sandbox_id, run_id, timeout=timeout)
        except SandboxError:
            stop_run(self.sandboxes, sandbox_id, run_id)
            raise SandboxError(f"the environment's setup did not finish within {timeout:g} s",
                               run_id=run_id) from None  # fmt: skip
        if code != 0:
            detail = read_stderr(self.sandboxes, sandbox_id, run_id, 1000)
            raise SandboxError(
                f"the environment's setup failed (exit {code}): "
                f"{detail.decode(errors='replace').strip()}",
                exit_code=code,
            )

    def ensure(self, session: Session) -> Session:
        """A live sandbox for a claimed session: made, cloned, set up and restored if needed."""
        if sandbox_alive(self.sandboxes, session):
            return session
        info, workspace = self.prepare(session)
        try:
            report = self.restorer.restore(session.id, info.id, workspace.repo_dir, home=HOME)
        except HangarError:
            self.sandboxes.destroy(info.id, hooks=False)
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        return self.records.update(
            session.id,
            sandbox_id=info.id,
            sandbox_expires_at=utcnow() + ttl,
            base_commit=session.base_commit or workspace.base_commit,
            base_branch=session.base_branch or workspace.base_branch,
            restored_from=report.checkpoint.id if report else None,
            restore_skipped=[SkippedCheckpoint(checkpoint_id=s.checkpoint_id, code=s.code,
                                               message=s.message)
                             for s in (report.skipped if report else [])],  # fmt: skip
        )

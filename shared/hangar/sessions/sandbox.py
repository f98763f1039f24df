"""A session's sandbox: the label that ties a sandbox to its session, whether the session's
sandbox is alive, what a checkpoint of it covers, and the pieces a start is made of (creating
one, cloning, the environment's setup, restoring), each short or detached.

Contracts: a session owns at most one sandbox, named by ``session.sandbox_id`` and labelled
``SESSION_LABEL=<session id>`` (the pre-destroy hook finds the session by that label; ``delete``
and a start that makes a new one destroy every other sandbox carrying it). Clone and setup run
detached as the agent (:mod:`hangar.processes.runs`): the caller polls them, so no request or
tick waits for a slow one, and a restarted worker finds them where they were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hangar import agent
from hangar.agent.toolkit import install_crypto
from hangar.config import Settings
from hangar.errors import CheckpointError, HangarError, SandboxCapabilityMissing, SandboxError
from hangar.errors import SandboxNotFound
from hangar.exchange.layout import exchange_dir
from hangar.sessions.conversations import conversation_dirs
from hangar.processes.following import RunFollowers
from hangar.processes.runs import read_run, read_stderr, run_started, start_run, stop_run
from hangar.models import Checkpoint, CheckpointReason, Environment, Session, StartKind
from hangar.sandboxes import (
    HOME,
    WORKSPACE,
    SandboxCapabilities,
    SandboxInfo,
    Sandboxes,
    SandboxSpec,
    SandboxStatus,
)
from hangar.sandboxes.policy import SandboxPolicy
from hangar.sessions.capacity import admit
from hangar.checkpoints.checkpointer import Checkpointer, CheckpointTarget
from hangar.sessions.environments import Environments
from hangar.sessions.images import image_refused
from hangar.sessions.records import Records
from hangar.checkpoints.restore import Restorer, RestoreReport
from hangar.sessions.workspace import clone_argv, repo_dir_for

SESSION_LABEL = "hangar.session"

logger = logging.getLogger(__name__)


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
        conversation_dirs=conversation_dirs(session),
        # its own part: what the agent hands back never crowds the conversation out of its cap
        exchange_dir=exchange_dir(session),
        fork_of=fork_point(session),
    )


def fork_point(session: Session) -> tuple[str, str] | None:
    """(session, checkpoint) a fork was made from while it starts (its first checkpoint reuses
    that one's chunks); None for a session that is not a fork starting."""
    start = session.start
    if start is not None and start.kind is StartKind.FORK and start.source and start.checkpoint:
        return start.source, start.checkpoint
    return None


def sandbox_alive(sandboxes: Sandboxes, session: Session) -> bool:
    """Whether the session names a sandbox and that sandbox still exists."""
    if not session.sandbox_id:
        return False
    try:
        sandboxes.get(session.sandbox_id)
    except SandboxNotFound:
        return False
    return True


def renew_lease(sandboxes: Sandboxes, session: Session) -> None:
    """Move the backend's lease on the session's sandbox on to its expiry (the port's
    ``extend``). A failure is logged, never the caller's: the reaper's next pass renews it
    again, well within the backend's margin."""
    if not session.sandbox_id or not session.sandbox_expires_at:
        return
    try:
        sandboxes.extend(session.sandbox_id, session.sandbox_expires_at)
    except HangarError as exc:
        logger.warning("renewing sandbox %s failed: %s", session.sandbox_id, exc.message)


def take_checkpoint(
    checkpointer: Checkpointer,
    records: Records,
    session: Session,
    reason: CheckpointReason,
    *,
    skip_if_unchanged: bool = False,
) -> Checkpoint | None:
    """Checkpoint the session's sandbox and keep the outcome on the session: a failure is its
    ``checkpoint_error`` (and is re-raised), a success clears it and sets the session's
    ``change`` to the size the checkpoint counted (one write, only when something changed)."""
    try:
        taken = checkpointer.take(checkpoint_target(session), reason,
                                  skip_if_unchanged=skip_if_unchanged)  # fmt: skip
    except CheckpointError as exc:
        records.update(session.id, checkpoint_error=f"{reason.value} checkpoint failed: "
                       f"{exc.message}")  # fmt: skip
        raise
    changes: dict[str, object] = {}
    if session.checkpoint_error:
        changes["checkpoint_error"] = None
    if taken is not None and taken.change != session.change:
        changes["change"] = taken.change
    if changes:
        records.update(session.id, **changes)
    return taken


@dataclass(frozen=True)
class RunState:
    """Where a detached run of a start is: not started, running, or ended with ``exit_code``."""

    started: bool
    exit_code: int | None = None
    stderr: str = ""

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def check_capabilities(can: SandboxCapabilities, env: Environment, backend: str) -> None:
    """SandboxCapabilityMissing, in the environment's terms, when a backend with ``can``
    (``backend`` its URL) cannot give what ``env`` needs: a host path repo, host ports, an
    image."""
    if env.repo.startswith("/") and not can.ro_paths:
        raise SandboxCapabilityMissing(
            f"environment {env.name}'s repo is a path on this machine ({env.repo}), and "
            "this sandbox backend cannot show host paths: give the environment a git URL",
            capability="ro_paths", missing=["ro_paths"], environment=env.name,
        )  # fmt: skip
    if env.host_ports and not can.host_ports:
        raise SandboxCapabilityMissing(
            f"environment {env.name} asks for host ports {list(env.host_ports)}, and this "
            "sandbox backend cannot reach the host's ports: remove them from the "
            "environment", capability="host_ports", missing=["host_ports"],
            environment=env.name,
        )  # fmt: skip
    if env.image and not can.images:
        raise image_refused(backend, f"environment {env.name} names image {env.image}",
                            environment=env.name)  # fmt: skip


class Provisioner:
    """The pieces of a start, on the session's sandbox."""

    def __init__(
        self, settings: Settings, sandboxes: SandboxPolicy, environments: Environments,
        restorer: Restorer, followers: RunFollowers | None = None,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.sandboxes = sandboxes
        self.environments = environments
        self.restorer = restorer
        self.followers = followers or RunFollowers(sandboxes)

    def create(self, session: Session, env: Environment) -> SandboxInfo:
        """A new sandbox for the session, requested (it may still be pending: see
        :meth:`status`); any other sandbox labelled with it (left by a start that died before
        recording it) is destroyed first. SandboxCapabilityMissing, with nothing made, when
        the environment needs what the backend cannot give (a host path repo, host ports, an
        image). The spec carries the environment's image, if it names one, and its name as
        the pool (sandboxes of one environment come from one warm pool where the backend has
        pools).
        CapacityExhausted, with no sandbox left, when it would pass ``HANGAR_MAX_SANDBOXES``
        (:func:`~hangar.sessions.capacity.admit`)."""
        ro_paths = [env.repo] if env.repo.startswith("/") else []
        self._check_capabilities(env)
        self.destroy_all(session.id)
        info = self.sandboxes.create(SandboxSpec(labels={SESSION_LABEL: session.id},
                                                 ro_paths=ro_paths, host_ports=env.host_ports,
                                                 image=env.image, pool=env.name))  # fmt: skip
        admit(self.settings, self.sandboxes, info)  # CapacityExhausted: it is gone again
        return info

    def status(self, sandbox_id: str) -> SandboxStatus:
        """Where the new sandbox is (the port's ``status``): a start execs into it, through
        :meth:`prepare`, only once it is ready."""
        return self.sandboxes.status(sandbox_id)

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        """Where the new sandbox is once it stops pending, or after ``timeout`` seconds (the
        port's ``await_status``; a backend that cannot wait answers at once)."""
        return self.sandboxes.await_status(sandbox_id, timeout)

    def prepare(self, sandbox_id: str) -> None:
        """Install hangar's scripts and its ``hangar-agent`` command in a ready sandbox (one
        exec, :func:`hangar.agent.install`); where checkpoints go straight between sandbox and
        bucket, hangar's ``cryptography`` too (:func:`hangar.agent.toolkit.install_crypto`: a
        sandbox that cannot use it has its checkpoints go through the control plane)."""
        agent.install(self.sandboxes, sandbox_id)
        if self.restorer.signer is not None:
            probe = install_crypto(self.sandboxes, sandbox_id, self.settings)
            if not probe.available:
                logger.warning("sandbox %s cannot seal checkpoints itself (%s): they go through "
                               "the control plane", sandbox_id, probe.reason)  # fmt: skip

    def _check_capabilities(self, env: Environment) -> None:
        """Say in the environment's terms what the backend lacks (before anything is made)."""
        check_capabilities(self.sandboxes.capabilities, env, self.settings.sandboxes)

    def destroy_all(self, session_id: str, keep: str | None = None) -> list[str]:
        """Destroy, without hooks, every sandbox labelled with the session but ``keep``."""
        doomed = [i.id for i in self.sandboxes.list({SESSION_LABEL: session_id}) if i.id != keep]
        for sandbox_id in doomed:
            self.sandboxes.destroy(sandbox_id, hooks=False)
        return doomed

    def start_clone(self, session: Session, env: Environment, run_id: str) -> None:
        assert session.sandbox_id is not None
        argv = clone_argv(env.repo, work_branch=session.branch, branch=env.branch)
        start_run(self.sandboxes, session.sandbox_id, run_id, argv, cwd=WORKSPACE, env={})

    def start_setup(self, session: Session, env: Environment, run_id: str) -> None:
        """The environment's setup, as the agent: its variables and secrets reach it through a
        file of hangar's, never a command line."""
        assert session.sandbox_id is not None and env.setup
        start_run(self.sandboxes, session.sandbox_id, run_id, ["bash", "-lc", env.setup],
                  cwd=repo_dir_for(env.repo), env=self.environments.turn_env(env))  # fmt: skip

    def run_state(self, session: Session, run_id: str) -> RunState:
        """Whether a start's run was started and how it ended (the tail of its stderr). Read
        from this process's follower of the run (:mod:`hangar.processes.following`): the start
        chain's polls of a long clone or setup make no call into the sandbox while one
        follows it."""
        assert session.sandbox_id is not None
        try:
            status = self.followers.status(session.sandbox_id, run_id)
        except SandboxError:  # no such run (never started), or the follow broke off
            if not run_started(self.sandboxes, session.sandbox_id, run_id):
                return RunState(started=False)
            status = read_run(self.sandboxes, session.sandbox_id, run_id, 0, 0)
        if not status.finished:
            return RunState(started=True)
        tail = status.stderr
        if tail is None:
            tail = read_stderr(self.sandboxes, session.sandbox_id, run_id, 1000)
        return RunState(True, status.exit_code, tail[-1000:].decode(errors="replace").strip())

    def stop(self, session: Session, run_id: str) -> None:
        if session.sandbox_id:
            try:
                stop_run(self.sandboxes, session.sandbox_id, run_id)
            except (SandboxError, SandboxNotFound):
                pass

    def restore(self, session: Session, *, fresh: bool = False) -> RestoreReport | None:
        """The newest checkpoint that restores, into the session's sandbox (None: none);
        ``fresh``: nothing has run on its clone (:meth:`Restorer.restore`)."""
        assert session.sandbox_id is not None
        return self.restorer.restore(session.id, session.sandbox_id,
                                     repo_dir_for(session.repo or ""), home=HOME,
                                     fresh=fresh)  # fmt: skip

"""A session's engine on the embedded backends, for tests that drive checkpoints, restores
and turns through real sandboxes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hangar import agent
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason, Session
from hangar.sandboxes import SandboxSpec
from hangar.sandboxes.local import LocalSandboxes
from hangar.checkpoints.checkpointer import DEFAULT_CONVERSATION_DIRS, Checkpointer, CheckpointTarget
from hangar.checkpoints.restore import Restorer
from hangar.sessions.workspace import Workspace, clone
from tests.conftest import GIT_IDENTITY


@dataclass
class Engine:
    db: SqliteDb
    blobs: LocalBlobs
    sandboxes: LocalSandboxes
    checkpointer: Checkpointer
    restorer: Restorer
    session: Session
    remote: Path
    conversation_dirs: Sequence[str] = field(default=DEFAULT_CONVERSATION_DIRS)
    host_ports: Sequence[int] = ()

    def sandbox(self) -> tuple[str, Workspace]:
        """A fresh sandbox with the remote cloned on the session's work branch (and the host
        ports, such as the model stub's, reachable)."""
        info = self.sandboxes.create(
            SandboxSpec(
                labels={"hangar.session": self.session.id},
                ro_paths=[str(self.remote)],
                env=GIT_IDENTITY,
                host_ports=self.host_ports,
            )
        )
        agent.install(self.sandboxes, info.id)  # as a session's start does
        workspace = clone(
            self.sandboxes, info.id, str(self.remote), work_branch=self.session.branch
        )
        return info.id, workspace

    def sh(self, sandbox_id: str, script: str, cwd: str = "/workspace/app") -> str:
        result = self.sandboxes.exec(sandbox_id, ["bash", "-euo", "pipefail", "-c", script], cwd=cwd)
        assert result.ok, result.stderr.decode()
        return result.stdout.decode()

    def target(self, sandbox_id: str, workspace: Workspace) -> CheckpointTarget:
        return CheckpointTarget(
            session_id=self.session.id,
            sandbox_id=sandbox_id,
            repo_dir=workspace.repo_dir,
            base=workspace.base_commit,
            harness="claude",
            harness_session="conv",
            conversation_dirs=self.conversation_dirs,
        )

    def take(self, sandbox_id: str, workspace: Workspace, **kw: object) -> Checkpoint:
        checkpoint = self.checkpointer.take(
            self.target(sandbox_id, workspace), CheckpointReason.TURN, **kw  # type: ignore[arg-type]
        )
        assert checkpoint is not None
        return checkpoint


def make_engine(
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    sandboxes: LocalSandboxes,
    remote: Path,
    *,
    name: str = "demo",
    harness: str = "claude",
    conversation_dirs: Sequence[str] = DEFAULT_CONVERSATION_DIRS,
    host_ports: Sequence[int] = (),
) -> Engine:
    session = db.create_session(Session(name=name, environment="app", harness=harness))
    return Engine(
        db=db,
        blobs=blobs,
        sandboxes=sandboxes,
        checkpointer=Checkpointer(db, blobs, keys, sandboxes, settings),
        restorer=Restorer(db, blobs, keys, sandboxes, settings),
        session=session,
        remote=remote,
        conversation_dirs=conversation_dirs,
        host_ports=host_ports,
    )

"""Forks: one checkpoint of a session restored into new sessions, each starting IDLE with its
own sandbox; the first turn of each forks the harness's conversation (``fork_from``) with the
harness's fork flag, or hands off when the harness cannot fork.

Contracts: :meth:`Forks.fork` is not idempotent: every call makes new sessions, named
``<source>-fork-<k>`` with the first free ``k``. The fork point is a fresh ``manual`` checkpoint
when the source is IDLE with a live sandbox (CheckpointError when it cannot be taken), else the
source's newest checkpoint (InvalidState when it has none). SessionBusy while the source runs a
turn, InvalidInput unless 1 <= n <= 10; both before anything is made. Forks are made one after
another, each sandbox set up as the environment says; a fork that fails to start is left
FAILED with its error and no sandbox, and the HangarError is raised, so the forks made before
it remain.
"""

from __future__ import annotations

from datetime import timedelta

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import HangarError, InvalidInput, InvalidState, SessionBusy
from hangar.models import Checkpoint, CheckpointReason, Session, SessionState as S, utcnow
from hangar.sandboxes import Sandboxes
from hangar.sessions.checkpoints import Checkpointer
from hangar.sessions.environments import Environments
from hangar.sessions.housekeeping import Housekeeping
from hangar.sessions.records import Records
from hangar.sessions.restore import Restorer
from hangar.sessions.sandbox import Provisioner, sandbox_alive, take_checkpoint
from hangar.sessions.turns import Turns


class Forks:
    """Makes forks of a session from one of its checkpoints."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        sandboxes: Sandboxes,
        environments: Environments,
        checkpointer: Checkpointer,
        restorer: Restorer,
        provisioner: Provisioner,
        records: Records,
        turns: Turns,
        housekeeping: Housekeeping,
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.environments = environments
        self.checkpointer = checkpointer
        self.restorer = restorer
        self.provisioner = provisioner
        self.records = records
        self.turns = turns
        self.housekeeping = housekeeping

    def fork(self, ref: str, n: int) -> list[Session]:
        """Restore one checkpoint of the session into ``n`` new sessions; the first turn of
        each forks the conversation with the harness's fork flag (or hands off)."""
        if not 1 <= n <= 10:
            raise InvalidInput("fork makes between 1 and 10 sessions", n=n)
        source = self.turns.catch_up(self.records.resolve(ref))
        if source.state is S.ACTIVE:
            raise SessionBusy(f"session {source.name} is running a turn", session=source.name)
        checkpoint = self._fork_point(source)
        forks = []
        for _ in range(n):
            forks.append(self._fork_one(source, checkpoint))
        return forks

    def _fork_point(self, source: Session) -> Checkpoint:
        if source.state is S.IDLE and sandbox_alive(self.sandboxes, source):
            taken = take_checkpoint(self.checkpointer, self.records, source,
                                    CheckpointReason.MANUAL)  # fmt: skip
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
            info, workspace = self.provisioner.prepare(fork)
        except HangarError as exc:
            self.records.fail(fork, exc)
            raise
        try:
            fork = self.records.update(fork.id, sandbox_id=info.id)
            self.restorer.restore_checkpoint(checkpoint, info.id, workspace.repo_dir)
            take_checkpoint(self.checkpointer, self.records, fork, CheckpointReason.MANUAL)
        except HangarError as exc:
            # A half-restored sandbox is of no use to anyone: it goes, and the FAILED fork
            # keeps no sandbox (the reaper would never take it).
            self.sandboxes.destroy(info.id, hooks=False)
            self.records.update(fork.id, state=S.FAILED, sandbox_id=None, error=exc.message)
            raise
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
        fork = self.records.update(fork.id, state=S.IDLE, restored_from=checkpoint.id,
                                   last_active_at=utcnow(), sandbox_expires_at=utcnow() + ttl)  # fmt: skip
        self.housekeeping.schedule_housekeeping(fork)
        return fork

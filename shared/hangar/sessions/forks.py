"""Forks: one checkpoint of a session restored into N new sessions, each a start of its own
(:mod:`hangar.sessions.startup`), whose first turn forks the conversation with the harness's
fork flag (or hands off, for a harness that cannot fork).

Contracts: the fork point is a fresh ``manual`` checkpoint when the source is IDLE with its
sandbox, else its newest checkpoint; InvalidState when it has none, SessionBusy while a turn
runs; CapacityExhausted when the sandboxes of all ``n`` would not fit (none is made). The
forks answer at once, STARTING; each restores in a sandbox of its own.
"""

from __future__ import annotations

from hangar.db import Db
from hangar.errors import InvalidInput, InvalidState, SessionBusy, SessionNotFound
from hangar.models import Checkpoint, CheckpointReason, Session, SessionState as S, StartIntent
from hangar.models import StartKind
from hangar.sandboxes import Sandboxes
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.records import Records
from hangar.sessions.sandbox import sandbox_alive, take_checkpoint
from hangar.sessions.startup import Startup

MAX_FORKS = 10


class Forks:
    """Forks a session into new ones."""

    def __init__(
        self, db: Db, sandboxes: Sandboxes, checkpointer: Checkpointer, records: Records,
        startup: Startup,
    ) -> None:  # fmt: skip
        self.db = db
        self.sandboxes = sandboxes
        self.checkpointer = checkpointer
        self.records = records
        self.startup = startup

    def fork(self, ref: str, n: int) -> list[Session]:
        """Start ``n`` new sessions from one checkpoint of session ``ref``."""
        if not 1 <= n <= MAX_FORKS:
            raise InvalidInput(f"fork makes between 1 and {MAX_FORKS} sessions", n=n)
        source = self.records.resolve(ref)
        if source.state in (S.ACTIVE, S.STARTING, S.SUSPENDING):
            raise SessionBusy(f"session {source.name} is busy ({source.state.value})",
                              session=source.name)  # fmt: skip
        self.startup.capacity.check(n)  # all of them or none
        checkpoint = self._fork_point(source)
        return [self._fork_one(source, checkpoint) for _ in range(n)]

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
        stem = source.name[:52].rstrip("-")  # room for "-fork-k" within the name limit
        while True:
            name = f"{stem}-fork-{k}"
            try:
                self.db.find_session(name)
            except SessionNotFound:  # the name is free
                break
            k += 1
        fork = Session(
            name=name,
            title=f"{source.title} (fork {k})",
            environment=source.environment,
            harness=source.harness,
            model=source.model,
            repo=source.repo,
            base_branch=source.base_branch,
            branch=source.branch,
            base_commit=source.base_commit,
            fork_from=source.harness_session,
            forked_from=source.id,
            idle_minutes=source.idle_minutes,
        )
        intent = StartIntent(kind=StartKind.FORK, source=source.id, checkpoint=checkpoint.id)
        return self.startup.create(fork, intent)

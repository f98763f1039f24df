"""Losing the sandbox on purpose: suspend (checkpoint, destroy, SUSPENDED) and archive (destroy,
drop the checkpoints, ARCHIVED), each under a claim, so that a worker that dies halfway leaves a
session the ``claim`` tick finishes, never one stuck in SUSPENDING.

Contracts: :meth:`Suspends.suspend` answers once the suspend is done. A checkpoint that fails
leaves the session IDLE with its sandbox and the error (nothing is destroyed without a
checkpoint); :meth:`Suspends.resume` retries a suspend or an archive whose worker died.
"""

from __future__ import annotations

import logging

from hangar.errors import CheckpointError, SessionBusy
from hangar.models import CheckpointReason, ClaimKind, Session, SessionState as S
from hangar.sandboxes.policy import SandboxPolicy
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.records import Records
from hangar.sessions.sandbox import Provisioner, sandbox_alive, take_checkpoint
from hangar.sessions.schedule import Schedule
from hangar.sessions.transitions import Transitions

logger = logging.getLogger(__name__)


class Suspends:
    """Suspends and archives sessions."""

    def __init__(
        self,
        sandboxes: SandboxPolicy,
        checkpointer: Checkpointer,
        provisioner: Provisioner,
        records: Records,
        transitions: Transitions,
        schedule: Schedule,
    ) -> None:
        self.sandboxes = sandboxes
        self.checkpointer = checkpointer
        self.provisioner = provisioner
        self.records = records
        self.transitions = transitions
        self.schedule = schedule

    def suspend(self, session: Session) -> Session:
        """IDLE to SUSPENDED: checkpoint (reason ``suspend``), destroy the sandbox. Already
        SUSPENDED: nothing to do. CheckpointError (the session back to IDLE) when it fails."""
        if session.state is S.SUSPENDED:
            return session
        self.schedule.expect_claim(session.id)
        claimed = self.transitions.claim_suspend(session)
        self.schedule.claim_expiry(claimed)
        return self._suspend(claimed)

    def _suspend(self, session: Session) -> Session:
        assert session.claim is not None
        token = session.claim.token
        if sandbox_alive(self.sandboxes, session):
            try:
                with self.transitions.keeping(session.id, token):
                    take_checkpoint(self.checkpointer, self.records, session,
                                    CheckpointReason.SUSPEND)  # fmt: skip
            except CheckpointError as exc:
                idle = self.transitions.abort_suspend(self.records.db.get_session(session.id),
                                                      token, exc.message)  # fmt: skip
                self.schedule.claim_expiry(idle)
                raise
            assert session.sandbox_id is not None
            self.sandboxes.destroy(session.sandbox_id, hooks=False)
        self.provisioner.destroy_all(session.id)
        done = self.transitions.suspended(self.records.db.get_session(session.id), token)
        self.schedule.claim_expiry(done)
        self.schedule.cancel_all(session.id)
        return done

    def archive(self, session: Session) -> Session:
        """IDLE, SUSPENDED or FAILED to ARCHIVED: the sandbox and the checkpoints go; the record,
        its turns and summaries stay."""
        self.schedule.expect_claim(session.id)
        claimed = self.transitions.claim_archive(session)
        self.schedule.claim_expiry(claimed)
        return self._archive(claimed)

    def _archive(self, session: Session) -> Session:
        assert session.claim is not None
        self.provisioner.destroy_all(session.id)
        self.checkpointer.drop_all(session.id)
        done = self.transitions.archived(self.records.db.get_session(session.id),
                                         session.claim.token)  # fmt: skip
        self.schedule.claim_expiry(done)
        self.schedule.cancel_all(session.id)
        return done

    def resume(self, session: Session) -> None:
        """A suspend or an archive whose worker died (its claim expired): do it again. A suspend
        whose checkpoint now fails goes back to IDLE with the error, its sandbox kept."""
        try:
            taken = self.transitions.take_over(session)
        except SessionBusy:
            return
        assert taken.claim is not None
        try:
            if taken.claim.kind is ClaimKind.ARCHIVE:
                self._archive(taken)
            else:
                self._suspend(taken)
        except CheckpointError as exc:
            logger.warning("the suspend of %s taken over: %s", session.id, exc.message)

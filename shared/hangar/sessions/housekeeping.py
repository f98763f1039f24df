"""Housekeeping: what each of the session service's ticks does when it comes due (the ticks
themselves are in :mod:`hangar.sessions.schedule`).

- ``start``: the next step of a start (:mod:`hangar.sessions.startup`);
- ``claim``: a claim's lease ran out. Renewed meanwhile: look again when it ends. Expired: the
  work is taken over and finished (a start carried on, a suspend or an archive done again, a
  turn's end finished; a finish gives up after its bounded tries, see :mod:`.turns`);
- ``watch``: finish the running turn once it has ended, and extend the sandbox's TTL;
- ``idle``: suspend a session unused for its idle time (not while a shell is open);
- ``interval``: checkpoint if something changed;
- ``reap``: destroy the sandboxes past their TTL, through the pre-destroy checkpoint, and
  renew the backend's lease on the others (``extend``: a cluster deletes a sandbox at a time
  of its own, set a margin past the TTL the session had when its sandbox was made); then
  check every kept warm pool (:meth:`.pools.PoolKeeper.check`: a wrong count, a missing pool
  or a lost ``pool`` tick repaired);
- ``pool``: an environment's warm pool hours reached a boundary (:mod:`.pools`).
- ``notify``: POST an event to HANGAR_NOTIFY_URL, again after a backoff while it fails, a
  bounded number of times (:func:`.notify.handle`).

Contracts: ticks are hints, delivered at least once and never early, possibly forged or stale.
:meth:`Housekeeping.handle_tick` drops a payload that does not parse, re-reads the session and
does only what is still due, so it is idempotent; a tick for a session that no longer exists is
dropped. A suspend that loses a race (SessionBusy, InvalidState) and a checkpoint that fails
(CheckpointError, logged, the session's ``checkpoint_error``) are swallowed; anything else raised
propagates to the ticker, which delivers the tick again.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    CheckpointError,
    DestroyVetoed,
    HangarError,
    NotFound,
    InvalidState,
    SandboxError,
    SandboxNotFound,
    SessionBusy,
    SessionNotFound,
)
from hangar.models import CheckpointReason, ClaimKind, Session, SessionState as S, TickDue, Turn
from hangar.models import utcnow
from hangar.sandboxes.policy import SandboxPolicy
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.records import Records
from hangar.sessions.sandbox import SESSION_LABEL, renew_lease, sandbox_alive, take_checkpoint
from hangar.sessions import notify
from hangar.sessions.pools import PoolKeeper
from hangar.sessions.schedule import REAP_SECONDS, ClaimTick, IdleTick, IntervalTick, PoolTick
from hangar.sessions.schedule import NotifyTick, ReapTick
from hangar.sessions.approvals import Approvals
from hangar.sessions.schedule import Schedule, StartTick, WatchTick, later, parse
from hangar.sessions.shells import live
from hangar.sessions.startup import Startup
from hangar.sessions.suspends import Suspends
from hangar.sessions.transitions import Transitions
from hangar.sessions.turns import Turns
from hangar.sessions.watching import latest_progress

logger = logging.getLogger(__name__)

ORPHAN_SECONDS = 600
"""How old a sandbox of a session that no longer exists must be before the reaper takes it."""


class Housekeeping:
    """Delivers the session ticks."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        sandboxes: SandboxPolicy,
        checkpointer: Checkpointer,
        records: Records,
        transitions: Transitions,
        schedule: Schedule,
        turns: Turns,
        startup: Startup,
        suspends: Suspends,
        pools: PoolKeeper | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.approvals = approvals
        self.sandboxes = sandboxes
        self.checkpointer = checkpointer
        self.records = records
        self.transitions = transitions
        self.schedule = schedule
        self.turns = turns
        self.startup = startup
        self.suspends = suspends
        self.pools = pools

    def handle_tick(self, due: TickDue) -> None:
        """Deliver a tick (see the module docstring)."""
        tick = parse(due)
        if tick is None:
            return
        if isinstance(tick, ReapTick):
            self.recover()
            self.reap()
            if self.pools is not None:
                self.pools.check()
            self.schedule.reap()
            return
        if isinstance(tick, PoolTick):
            if self.pools is not None:
                self.pools.handle(tick)
            return
        if isinstance(tick, NotifyTick):
            notify.handle(self.settings, self.schedule, tick, self._notify_url)
            return
        try:
            session = self.db.get_session(tick.session)
        except SessionNotFound:
            return
        if isinstance(tick, StartTick):
            self.startup.step(tick)
        elif isinstance(tick, ClaimTick):
            self._claim_expired(session)
        elif isinstance(tick, WatchTick):
            self._watch(session)
        elif isinstance(tick, IdleTick):
            self._idle_check(session)
        elif isinstance(tick, IntervalTick):
            self._interval_checkpoint(session)

    def recover(self) -> list[str]:
        """Find every claim whose lease has run out, whatever tick was lost, and take its work
        over (the reaper's pass, and ``hangar serve`` at start, do this). Returns the sessions."""
        now = utcnow()
        working = self.db.list_sessions(states=[S.STARTING, S.SUSPENDING, S.ACTIVE])
        for session in working:
            if session.state is S.ACTIVE and session.claim is None:
                self.schedule.watch(session.id)  # a running turn is always watched
        stale = [s for s in working if s.claim is not None and s.claim.until <= now]
        for session in stale:
            try:
                self._claim_expired(session)
            except HangarError as exc:
                logger.warning("could not take over the claim of %s: %s", session.id, exc.message)
        return [s.id for s in stale]

    def _claim_expired(self, session: Session) -> None:
        claim = session.claim
        if claim is None:
            return
        if claim.until > utcnow():
            self.schedule.claim_expiry(session)  # renewed meanwhile: look when it ends
            return
        logger.warning("the %s claim of %s by %s expired; taking it over", claim.kind.value,
                       session.id, claim.by)  # fmt: skip
        if claim.kind is ClaimKind.START:
            self.startup.resume(session)
        elif claim.kind is ClaimKind.FINISH_TURN:
            try:
                taken = self.transitions.take_over(session)
            except SessionBusy:
                return
            assert taken.claim is not None
            self.schedule.claim_expiry(taken)  # should this try die too (tries are bounded)
            self.turns.finish_claimed(taken, taken.claim.token)
        else:
            self.suspends.resume(session)

    def _notify_url(self, environment: str) -> str | None:
        """An environment's own notify URL, as it is now (None: gone, or none of its own)."""
        try:
            return self.db.get_environment(environment).notify_url
        except NotFound:
            return None

    def _watch(self, session: Session) -> None:
        if session.state is S.STARTING:  # about to run its turn: keep watching
            self.schedule.watch(session.id)
            return
        session = self.turns.watch(session)
        turn = self.turns.turn(session.id, None) if session.state is S.ACTIVE else None
        if turn is not None and self.approvals is not None:
            try:  # what the running turn's agent waits to be allowed
                self.approvals.scan(session, turn)
            except HangarError as exc:
                logger.warning("could not read the approvals of %s: %s", session.id, exc.message)
            session = self.db.get_session(session.id)
        if session.state is S.ACTIVE and session.claim is None:
            ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
            changes: dict[str, object] = {"sandbox_expires_at": utcnow() + ttl}
            said = self._progress(session, turn)
            if said is not None and said != session.progress:  # in the write made anyway
                changes["progress"] = said
            try:
                self.transitions.extend(session, **changes)
            except SessionBusy:
                pass  # it moved on meanwhile; the next watch extends it
            self.schedule.watch(session.id)

    def _progress(self, session: Session, turn: Turn | None) -> str | None:
        """The running turn's latest progress line (:func:`.watching.latest_progress`), or
        None when there is none to say (no turn running, nothing described, no word from its
        sandbox)."""
        if turn is None or turn.finished_at is not None or session.sandbox_id is None:
            return None
        try:
            return latest_progress(self.turns.followers, session, turn)
        except (SandboxError, SandboxNotFound):
            return None  # the next watch sees what became of it

    def _idle_check(self, session: Session) -> None:
        if session.state is not S.IDLE or not session.sandbox_id or session.idle_minutes == 0:
            return
        quiet_until = self.schedule.idle_due(session)
        leases = list(live(session.shells).values())
        if leases:
            quiet_until = max(quiet_until, *leases)
        if utcnow() < quiet_until:
            self.schedule.idle(session, quiet_until)
            return
        try:
            self.suspends.suspend(session)
        except (SessionBusy, InvalidState):
            pass  # someone used it meanwhile; their activity reschedules
        except CheckpointError as exc:
            logger.warning("idle suspend of %s failed: %s", session.id, exc.message)

    def _interval_checkpoint(self, session: Session) -> None:
        if session.state not in (S.IDLE, S.ACTIVE) or not sandbox_alive(self.sandboxes, session):
            return
        try:
            take_checkpoint(self.checkpointer, self.records, session, CheckpointReason.INTERVAL,
                            skip_if_unchanged=True)  # fmt: skip
        except CheckpointError as exc:
            logger.warning("interval checkpoint of %s failed: %s", session.id, exc.message)
        self.schedule.interval(session)

    def reap(self) -> list[str]:
        """Destroy every sandbox whose session's TTL has passed (not during a turn), each
        through the pre-destroy hook, concurrently. Returns the ids of those destroyed. The
        reaper never forces: a sandbox whose checkpoint fails (DestroyVetoed) is kept until
        the next pass, with the failure on its session (``checkpoint_error``), and tried again
        then; one that could not be destroyed for another reason is logged and left too.
        Every other sandbox of an idle or active session, not yet due, has the backend's lease
        renewed to its session's expiry (which activity has moved on; a backend asks nothing
        of a lease it knows to be later already)."""
        now = utcnow()
        doomed = []
        for s in self.db.list_sessions(states=[S.IDLE, S.ACTIVE]):
            if not s.sandbox_id or not s.sandbox_expires_at:
                continue
            if s.sandbox_expires_at <= now and s.state is S.IDLE:
                doomed.append((s.id, s.sandbox_id))
            elif s.sandbox_expires_at > now:
                renew_lease(self.sandboxes, s)
        destroyed: list[str] = []

        def destroy(session_id: str, sandbox_id: str) -> None:
            try:
                self.sandboxes.destroy(sandbox_id)
            except DestroyVetoed as exc:
                logger.warning("kept sandbox %s past its time: %s", sandbox_id, exc.message)
                try:
                    self.records.update(session_id, sandbox_expires_at=later(REAP_SECONDS))
                except HangarError:
                    pass  # the next pass finds it due again either way
            except HangarError as exc:  # the next reap tries again
                logger.warning("reaping sandbox %s failed: %s", sandbox_id, exc.message)
            else:
                destroyed.append(sandbox_id)  # list.append is atomic

        threads = [threading.Thread(target=destroy, args=pair) for pair in doomed]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(destroyed + self.reap_orphans())

    def reap_orphans(self) -> list[str]:
        """Destroy, without hooks (no session is left to checkpoint for), every sandbox
        labelled with a session that no longer exists, once it is older than
        :data:`ORPHAN_SECONDS` (a start records its sandbox well within that): a session
        deleted while a step of its start was making one. Returns their ids."""
        cutoff = utcnow() - timedelta(seconds=ORPHAN_SECONDS)
        orphans = []
        for info in self.sandboxes.list():
            owner = info.labels.get(SESSION_LABEL)
            if owner is None or info.created_at > cutoff:
                continue
            try:
                self.db.get_session(owner)
            except SessionNotFound:
                orphans.append(info.id)
        for sandbox_id in orphans:
            try:
                self.sandboxes.destroy(sandbox_id, hooks=False)
            except HangarError as exc:  # the next pass tries again
                logger.warning("reaping orphan sandbox %s failed: %s", sandbox_id, exc.message)
        return orphans

"""Housekeeping: the session service's scheduled hints and what each does when it comes due.

Ticks (keys): ``watch:<session>`` every WATCH_SECONDS while a turn runs (catch up with it and
extend the sandbox's TTL), ``idle:<session>`` when an IDLE session's idle timeout (or its
longest open-shell lease) runs out (suspend it), ``interval:<session>`` every
``session_checkpoint_minutes`` (checkpoint if something changed) and one ``reap`` every
REAP_SECONDS (destroy sandboxes past their TTL).

Contracts: ticks are hints, delivered at least once and never early.
:meth:`Housekeeping.handle_tick` re-reads the session and does only what is still due, so it is
idempotent; a tick for a session that no longer exists is dropped. A suspend that loses a race (SessionBusy, InvalidState) and an
interval checkpoint that fails (CheckpointError, logged) are swallowed; anything else raised
propagates to the ticker, which delivers the tick again. Scheduling a key again moves it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    CheckpointError,
    DestroyVetoed,
    HangarError,
    InvalidState,
    SessionBusy,
    SessionNotFound,
)
from hangar.models import CheckpointReason, Session, SessionState as S, TickDue, utcnow
from hangar.sandboxes import Sandboxes
from hangar.sessions.checkpoints import Checkpointer
from hangar.sessions.records import Records
from hangar.sessions.sandbox import sandbox_alive, take_checkpoint
from hangar.ticks import Ticks

logger = logging.getLogger(__name__)

WATCH_SECONDS = 2.0
REAP_SECONDS = 60.0


def later(seconds: float) -> datetime:
    """``seconds`` from now."""
    return utcnow() + timedelta(seconds=seconds)


class Housekeeping:
    """Schedules and handles the session ticks. ``catch_up`` finishes a session's ended turn
    (returning the session as it is now) and ``suspend`` suspends a session by reference: both
    are the session service's, handed in so this module does not depend on it."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        sandboxes: Sandboxes,
        ticks: Ticks,
        checkpointer: Checkpointer,
        records: Records,
        *,
        catch_up: Callable[[Session], Session],
        suspend: Callable[[str], Session],
    ) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.ticks = ticks
        self.checkpointer = checkpointer
        self.records = records
        self.catch_up = catch_up
        self.suspend = suspend

    # -- delivering ticks -------------------------------------------------------------------

    def handle_tick(self, due: TickDue) -> None:
        """Deliver a tick: ``watch`` (catch up with a running turn), ``idle`` (suspend an unused
        session), ``interval`` (checkpoint if something changed), ``reap`` (destroy expired
        sandboxes). Ticks are hints: each re-reads state and does only what is still due."""
        if due.kind == "reap":
            self.reap()
            self.ticks.schedule("reap", "reap", later(REAP_SECONDS))
            return
        try:
            session = self.db.get_session(str(due.payload.get("session")))
        except SessionNotFound:
            return
        if due.kind == "watch":
            session = self.catch_up(session)
            if session.state is S.ACTIVE:
                ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)
                self.records.update(session.id, sandbox_expires_at=utcnow() + ttl)
                self.ticks.schedule(due.key, "watch", later(WATCH_SECONDS), due.payload)
        elif due.kind == "idle":
            self._idle_check(session)
        elif due.kind == "interval":
            self._interval_checkpoint(session)

    def _idle_check(self, session: Session) -> None:
        if session.state is not S.IDLE or not session.sandbox_id or session.idle_minutes == 0:
            return
        quiet_until = self.idle_due(session)
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

    def idle_due(self, session: Session) -> datetime:
        """When the session becomes idle enough to suspend, by its last activity alone."""
        idle = timedelta(minutes=session.idle_minutes)
        grace = timedelta(seconds=self.settings.activity_grace_seconds)
        return session.last_active_at + max(idle, grace)

    def _interval_checkpoint(self, session: Session) -> None:
        if session.state not in (S.IDLE, S.ACTIVE) or not sandbox_alive(self.sandboxes, session):
            return
        try:
            take_checkpoint(self.checkpointer, self.records, session, CheckpointReason.INTERVAL,
                            skip_if_unchanged=True)  # fmt: skip
        except CheckpointError as exc:
            logger.warning("interval checkpoint of %s failed: %s", session.id, exc.message)
        self.schedule_interval(session)

    def reap(self) -> list[str]:
        """Destroy every sandbox whose session's TTL has passed (not during a turn), each
        through the pre-destroy hook, concurrently. Returns the ids of those destroyed. The
        reaper never forces: a sandbox whose checkpoint fails (DestroyVetoed) is kept until
        the next pass, with the failure on its session (``checkpoint_error``), and tried again
        then; one that could not be destroyed for another reason is logged and left too."""
        now = utcnow()
        doomed = [
            (s.id, s.sandbox_id)
            for s in self.db.list_sessions(states=[S.IDLE])
            if s.sandbox_id and s.sandbox_expires_at and s.sandbox_expires_at <= now
        ]
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
        return sorted(destroyed)

    # -- scheduling -------------------------------------------------------------------------

    def schedule_watch(self, session_id: str) -> None:
        """Watch the session's running turn: the first watch tick, WATCH_SECONDS from now."""
        self.ticks.schedule(f"watch:{session_id}", "watch", later(WATCH_SECONDS),
                            {"session": session_id})  # fmt: skip

    def cancel_watch(self, session_id: str) -> None:
        """Stop watching: the session's turn is over."""
        self.ticks.cancel(f"watch:{session_id}")

    def schedule_housekeeping(self, session: Session) -> None:
        """The idle check, the interval checkpoint and the reaper, for a session that has a
        sandbox and no turn running."""
        self.schedule_idle(session)
        self.schedule_interval(session)
        self.ticks.schedule("reap", "reap", later(REAP_SECONDS))

    def schedule_idle(self, session: Session) -> None:
        """(Re)schedule the idle check from the session's last activity; cancel it when the
        session never suspends for idleness or is neither IDLE nor ACTIVE."""
        key = f"idle:{session.id}"
        if session.idle_minutes == 0 or session.state not in (S.IDLE, S.ACTIVE):
            self.ticks.cancel(key)
            return
        self.ticks.schedule(key, "idle", self.idle_due(session), {"session": session.id})

    def schedule_interval(self, session: Session) -> None:
        """The next interval checkpoint (none unless ``session_checkpoint_minutes`` is positive)."""
        minutes = self.settings.session_checkpoint_minutes
        if minutes > 0:
            self.ticks.schedule(f"interval:{session.id}", "interval",
                                later(minutes * 60), {"session": session.id})  # fmt: skip

    def cancel_ticks(self, session_id: str) -> None:
        """Cancel every per-session tick (the shared reaper keeps running)."""
        for kind in ("watch", "idle", "interval"):
            self.ticks.cancel(f"{kind}:{session_id}")

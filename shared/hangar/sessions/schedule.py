"""The session service's ticks: one typed payload per kind, and the scheduling of each.

Keys (one due-time each; scheduling a key again moves it):

- ``start:<session>`` (:class:`StartTick`): the next step of a start; it carries the claim's
  token, so only the start it belongs to acts on it.
- ``claim:<session>`` (:class:`ClaimTick`): when a claim's lease runs out; whoever gets it
  finishes or undoes the work of a claim nobody renewed.
- ``watch:<session>``: every WATCH_SECONDS while a turn runs (finish it once it has ended).
- ``idle:<session>``: when an IDLE session's idle time (or its longest shell lease) runs out.
- ``interval:<session>``: every ``session_checkpoint_minutes`` (checkpoint if something changed).
- ``reap`` (:class:`ReapTick`): every REAP_SECONDS (sandboxes past their TTL, and the warm
  pools checked).
- ``pool:<environment>`` (:class:`PoolTick`): the next boundary of an environment's warm pool
  hours (:mod:`hangar.sessions.pools`), when its pool grows to its size or shrinks to none.
- ``notify:<event id>`` (:class:`NotifyTick`): an event to POST to ``HANGAR_NOTIFY_URL``
  (:mod:`hangar.sessions.notify`), due now, and again after a backoff while it fails.

A payload that does not parse (a forged or stale tick) is dropped by :func:`parse`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hangar.config import Settings
from hangar.models import Session, SessionState as S, TickDue, Turn, utcnow
from hangar.sessions.notify import MAX_TRIES, NotifyEvent, approval_event, turn_event
from hangar.ticks import Ticks

logger = logging.getLogger(__name__)

WATCH_SECONDS = 2.0
REAP_SECONDS = 60.0
POLL_SECONDS = (0.2, 0.5, 1.0, 2.0)
"""How soon a start step looks again at a detached run (clone, setup), by how often it has."""
CLAIM_GRACE_SECONDS = 1.0


class _Tick(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionTick(_Tick):
    session: str


class StartTick(SessionTick):
    kind: Literal["start"] = "start"
    token: str


class ClaimTick(SessionTick):
    kind: Literal["claim"] = "claim"


class WatchTick(SessionTick):
    kind: Literal["watch"] = "watch"


class IdleTick(SessionTick):
    kind: Literal["idle"] = "idle"


class IntervalTick(SessionTick):
    kind: Literal["interval"] = "interval"


class ReapTick(_Tick):
    kind: Literal["reap"] = "reap"


class PoolTick(_Tick):
    kind: Literal["pool"] = "pool"
    environment: str


class NotifyTick(_Tick):
    kind: Literal["notify"] = "notify"
    event: NotifyEvent
    attempt: int = Field(default=0, ge=0, lt=MAX_TRIES, description="tries made before this")
    environment: str | None = Field(default=None, description="the environment whose notify "
                                    "URL takes the event, read when it is sent (None: "
                                    "HANGAR_NOTIFY_URL); never a URL: a tick names no place")


Tick = (StartTick | ClaimTick | WatchTick | IdleTick | IntervalTick | ReapTick | PoolTick
        | NotifyTick)  # fmt: skip
_KINDS: dict[str, type[_Tick]] = {
    "start": StartTick, "claim": ClaimTick, "watch": WatchTick, "idle": IdleTick,
    "interval": IntervalTick, "reap": ReapTick, "pool": PoolTick, "notify": NotifyTick,
}  # fmt: skip


def parse(due: TickDue) -> Tick | None:
    """The typed payload of a delivered tick, or None (logged) when it does not parse."""
    kind = _KINDS.get(due.kind)
    if kind is None:
        logger.warning("dropped a tick of unknown kind %r (%s)", due.kind, due.key)
        return None
    try:
        return kind.model_validate({**due.payload, "kind": due.kind})  # type: ignore[return-value]
    except ValidationError:
        logger.warning("dropped a %s tick whose payload does not parse (%s)", due.kind, due.key)
        return None


def later(seconds: float) -> datetime:
    """``seconds`` from now."""
    return utcnow() + timedelta(seconds=seconds)


class Schedule:
    """Schedules and cancels the session ticks over the ticks port."""

    def __init__(self, settings: Settings, ticks: Ticks) -> None:
        self.settings = settings
        self.ticks = ticks

    def _put(self, key: str, tick: Tick, due_at: datetime) -> None:
        payload = tick.model_dump(mode="json", exclude={"kind"})
        self.ticks.schedule(key, tick.kind, due_at, payload)

    def start_step(self, session_id: str, token: str, seconds: float = 0.0) -> None:
        """The next step of a start, ``seconds`` from now."""
        self._put(f"start:{session_id}", StartTick(session=session_id, token=token),
                  later(seconds))  # fmt: skip

    @property
    def _grace(self) -> timedelta:
        return timedelta(seconds=min(CLAIM_GRACE_SECONDS, self.settings.claim_lease_seconds / 2))

    def expect_claim(self, session_id: str) -> None:
        """Before claiming: look at the session when the claim about to be taken would run
        out, so that a worker dying right after the claim still leaves a tick behind."""
        due = later(self.settings.claim_lease_seconds) + self._grace
        self._put(f"claim:{session_id}", ClaimTick(session=session_id), due)

    def claim_expiry(self, session: Session) -> None:
        """Look at the session when its claim's lease runs out (none: no tick)."""
        key = f"claim:{session.id}"
        if session.claim is None:
            self.ticks.cancel(key)
            return
        self._put(key, ClaimTick(session=session.id), session.claim.until + self._grace)

    def watch(self, session_id: str) -> None:
        """Watch the session's running turn: the first watch tick, WATCH_SECONDS from now."""
        self._put(f"watch:{session_id}", WatchTick(session=session_id), later(WATCH_SECONDS))

    def cancel_watch(self, session_id: str) -> None:
        self.ticks.cancel(f"watch:{session_id}")

    def housekeeping(self, session: Session) -> None:
        """The idle check, the interval checkpoint and the reaper, for a session that has a
        sandbox and no turn running."""
        self.idle(session)
        self.interval(session)
        self.reap()

    def reap(self, seconds: float = REAP_SECONDS) -> None:
        self._put("reap", ReapTick(), later(seconds))

    def idle_due(self, session: Session) -> datetime:
        """When the session becomes idle enough to suspend, by its last activity alone."""
        idle = timedelta(minutes=session.idle_minutes)
        grace = timedelta(seconds=self.settings.activity_grace_seconds)
        return session.last_active_at + max(idle, grace)

    def idle(self, session: Session, at: datetime | None = None) -> None:
        """(Re)schedule the idle check from the session's last activity (or at ``at``); cancel
        it when the session never suspends for idleness or is neither IDLE nor ACTIVE."""
        key = f"idle:{session.id}"
        if session.idle_minutes == 0 or session.state not in (S.IDLE, S.ACTIVE):
            self.ticks.cancel(key)
            return
        self._put(key, IdleTick(session=session.id), at or self.idle_due(session))

    def interval(self, session: Session) -> None:
        """The next interval checkpoint (none unless ``session_checkpoint_minutes`` > 0)."""
        minutes = self.settings.session_checkpoint_minutes
        if minutes > 0:
            self._put(f"interval:{session.id}", IntervalTick(session=session.id),
                      later(minutes * 60))  # fmt: skip

    def pool(self, environment: str, due_at: datetime | None) -> None:
        """The environment's next warm pool boundary at ``due_at`` (None: none, cancelled)."""
        key = f"pool:{environment}"
        if due_at is None:
            self.ticks.cancel(key)
            return
        self._put(key, PoolTick(environment=environment), due_at)

    def notify(self, event: NotifyEvent, attempt: int = 0, seconds: float = 0.0,
               environment: str | None = None) -> None:
        """POST ``event`` to ``environment``'s notify URL (one that has its own), else
        HANGAR_NOTIFY_URL, ``seconds`` from now, through a ``notify`` tick (nothing when
        neither applies, or there is no HANGAR_NOTIFY_SECRET to sign with). Scheduling the
        same event again moves its tick."""
        if (environment or self.settings.notify_url) and self.settings.notify_secret is not None:
            tick = NotifyTick(event=event, attempt=attempt, environment=environment)
            self._put(f"notify:{event.id}", tick, later(seconds))

    def turn_ended(self, session: Session, turn: Turn, environment: str | None = None) -> None:
        """Tell HANGAR_NOTIFY_URL (or ``environment``'s own notify URL) that the (recorded)
        turn ended: ``needs_input``, ``turn_failed`` or ``turn_finished``
        (:func:`.notify.turn_event`)."""
        self.notify(turn_event(session, turn), environment=environment)

    def approval_pending(self, session: Session, turn: int, approval_id: str,
                         summary: str | None = None,
                         environment: str | None = None) -> None:  # fmt: skip
        """Tell HANGAR_NOTIFY_URL (or ``environment``'s own) that an approval of turn ``turn``
        waits for a person."""
        self.notify(approval_event(session, turn, approval_id, summary),
                    environment=environment)  # fmt: skip

    def cancel_all(self, session_id: str) -> None:
        """Cancel every per-session tick (the shared reaper keeps running)."""
        for kind in ("start", "claim", "watch", "idle", "interval"):
            self.ticks.cancel(f"{kind}:{session_id}")

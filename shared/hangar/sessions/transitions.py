"""The life of a session as one explicit state machine: every change of state is a named
transition here, each one compare-and-set on the session record.

::

                 new ──► STARTING ◄──────────────── claim_start ─┐
                           │  advance (phase, lease)              │
              fail_start   │  activate       ready                │
        FAILED ◄───────────┤────────► ACTIVE ──────► IDLE ◄───────┤ (IDLE, SUSPENDED, FAILED)
          │                │           │  claim_finish, finish_turn ▲   │
          │                │           │  (await_repair: claim let go)  │
          │                └─ turn_not_started ─────────────────────┘   │ claim_suspend
          │                            │ lose_sandbox                    ▼
          │                            ▼                            SUSPENDING
          │                       SUSPENDED ◄──────── suspended ────────┤ abort_suspend ► IDLE
          │                            │                                │ archived
          └──── claim_archive ─────────┴──► SUSPENDING (archive) ───────┴──► ARCHIVED

A **claimed** state (STARTING, SUSPENDING, and ACTIVE while its turn is being finished) holds a
:class:`~hangar.models.Claim`: who works on it and until when. The worker renews the lease
while it works (:meth:`Transitions.renew`); a claim whose lease has run out is anyone's to take
over (:meth:`Transitions.take_over`), so no crash leaves a session that only ``delete`` can move.
Housekeeping looks at every claim when its lease ends (the ``claim`` tick). A lease runs from
when its claim is written, not from when it was asked for: a claiming write that took a third of
the lease or more (a contended database) is renewed at once, so no claim lands expired and is
taken over from a worker that has only begun.

Contracts: every method re-reads nothing it was not given, writes once (a claiming one twice
when its claim landed late, as above), and raises SessionBusy when the session changed
meanwhile or is busy, InvalidState when the session is in a state the transition never applies
to, and LostClaim (a SessionBusy) when the caller's claim is no longer the session's. :data:`TRANSITIONS` lists each transition's from and to states; a
test walks every allowed and every refused pair.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from hangar.db import Db
from hangar.errors import HangarError, InvalidState, SessionBusy, SessionNotFound
from hangar.errors import VersionConflict
from hangar.models import Claim, ClaimKind, Phase, Session, SessionState as S, StartError
from hangar.models import StartIntent, StartStep, utcnow

logger = logging.getLogger(__name__)

WORKER = f"{socket.gethostname()}:{os.getpid()}"
"""Who this process is, in the claims it takes."""

_ANY = frozenset(S)
TRANSITIONS: Mapping[str, tuple[frozenset[S], S | None]] = {
    "claim_start": (frozenset({S.IDLE, S.SUSPENDED, S.FAILED}), S.STARTING),
    "advance": (frozenset({S.STARTING}), S.STARTING),
    "activate": (frozenset({S.STARTING}), S.ACTIVE),
    "ready": (frozenset({S.STARTING}), S.IDLE),
    "turn_not_started": (frozenset({S.STARTING}), S.IDLE),
    "fail_start": (frozenset({S.STARTING}), S.FAILED),
    "claim_finish": (frozenset({S.ACTIVE}), S.ACTIVE),
    "finish_turn": (frozenset({S.ACTIVE}), S.IDLE),
    "await_repair": (frozenset({S.ACTIVE}), None),
    "claim_suspend": (frozenset({S.IDLE}), S.SUSPENDING),
    "suspended": (frozenset({S.SUSPENDING}), S.SUSPENDED),
    "abort_suspend": (frozenset({S.SUSPENDING}), S.IDLE),
    "claim_archive": (frozenset({S.IDLE, S.SUSPENDED, S.FAILED}), S.SUSPENDING),
    "archived": (frozenset({S.SUSPENDING}), S.ARCHIVED),
    "lose_sandbox": (frozenset({S.IDLE, S.ACTIVE}), S.SUSPENDED),
    "extend": (frozenset({S.IDLE, S.ACTIVE}), None),  # None: the state stays
    "switch_harness": (frozenset({S.IDLE, S.SUSPENDED, S.FAILED}), None),
}
"""Each transition: the states it applies to, and the state it leaves (None: unchanged)."""

CLAIMED = frozenset({S.STARTING, S.SUSPENDING})
"""States that always carry a claim."""


class LostClaim(SessionBusy):
    """The caller's claim is no longer the session's: it expired and someone took over."""

    code = "session_busy"


def new_claim(kind: ClaimKind, lease_seconds: float, now: datetime | None = None) -> Claim:
    """A claim of this worker's, its lease running ``lease_seconds`` from ``now`` (default:
    the wall clock)."""
    return Claim(kind=kind, by=WORKER, token=secrets.token_hex(8),
                 until=(now or utcnow()) + timedelta(seconds=lease_seconds))  # fmt: skip


class Transitions:
    """The named transitions over the db port; ``lease_seconds`` is a claim's lease, ``clock``
    the time leases are counted in (the wall clock; a test's own)."""

    def __init__(self, db: Db, lease_seconds: float,
                 clock: Callable[[], datetime] = utcnow) -> None:  # fmt: skip
        self.db = db
        self.lease_seconds = lease_seconds
        self.clock = clock

    def _until(self) -> datetime:
        return self.clock() + timedelta(seconds=self.lease_seconds)

    def _new_claim(self, kind: ClaimKind) -> Claim:
        return new_claim(kind, self.lease_seconds, self.clock())

    def _granted(self, written: Session) -> Session:
        """The session as its claiming write left it, the lease renewed at once when that
        write took a third of it or more (a lease counts from when its claim is written). A
        renewal that loses a race returns the write as it was: the caller's next transition
        says whether the claim is still its own."""
        claim = written.claim
        if claim is None:
            return written
        left = (claim.until - self.clock()).total_seconds()
        if left > self.lease_seconds * 2 / 3:
            return written
        logger.warning("the %s claim of %s took %.1f s of its %g s lease to write; renewing it",
                       claim.kind.value, written.id, self.lease_seconds - left,
                       self.lease_seconds)  # fmt: skip
        try:
            return self.renew(written, claim.token)
        except SessionBusy:
            return written

    # -- the machinery ----------------------------------------------------------------------

    def _move(self, session: Session, name: str, *, claim: Claim | None = None,
              token: str | None = None, release: bool = False,
              **changes: Any) -> Session:  # fmt: skip
        """Apply transition ``name`` to ``session`` as read: compare-and-set on its version.
        ``token``: the caller must hold the session's claim."""
        allowed, to = TRANSITIONS[name]
        if session.state not in allowed:
            if session.state in CLAIMED or session.state is S.ACTIVE:
                raise SessionBusy(f"session {session.name} is busy ({session.state.value})",
                                  session=session.name, state=session.state.value)  # fmt: skip
            raise InvalidState(f"cannot {name.replace('_', ' ')} a session that is "
                               f"{session.state.value}", session=session.name,
                               state=session.state.value)  # fmt: skip
        if token is not None and (session.claim is None or session.claim.token != token):
            raise LostClaim(f"session {session.name}: the claim was taken over",
                            session=session.name)  # fmt: skip
        update: dict[str, Any] = {**changes, "updated_at": utcnow()}
        if to is not None:
            update["state"] = to
        # A transition that claims says so; one that keeps the state keeps the claim; any other
        # change of state ends the claim (the work it covered is done).
        keep = to is None and not release
        update["claim"] = claim if claim is not None else session.claim if keep else None
        try:
            written = self.db.update_session(session.model_copy(update=update))
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile; it is busy",
                              session=session.name) from None  # fmt: skip
        return self._granted(written) if claim is not None else written

    def renew(self, session: Session, token: str) -> Session:
        """Extend the caller's lease (the session as read; the claim must still be its)."""
        if session.claim is None or session.claim.token != token:
            raise LostClaim(f"session {session.name}: the claim was taken over",
                            session=session.name)  # fmt: skip
        claim = session.claim.model_copy(update={"until": self._until()})
        try:
            return self.db.update_session(session.model_copy(update={"claim": claim}))
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile", session=session.name
                              ) from None  # fmt: skip

    def note_failure(self, session: Session, token: str, error: str) -> Session:
        """Record on the caller's claim why its try failed; the lease is left to run out, so
        the work is taken over (and tried again) when it does."""
        if session.claim is None or session.claim.token != token:
            raise LostClaim(f"session {session.name}: the claim was taken over",
                            session=session.name)  # fmt: skip
        claim = session.claim.model_copy(update={"error": error})
        try:
            return self.db.update_session(session.model_copy(update={"claim": claim}))
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile", session=session.name
                              ) from None  # fmt: skip

    @contextlib.contextmanager
    def keeping(self, session_id: str, token: str) -> Iterator[None]:
        """Renew the caller's lease every third of it while the block runs (a restore or a
        checkpoint can outlast a lease). A renewal that fails while the claim is still the
        caller's (a write meanwhile, a contended or unreachable database) is tried again after
        a twelfth of the lease: the work goes on, so its lease must. Renewals stop once the
        claim is lost or the session gone (the block finds out at its next transition). The
        block must re-read the session after it: each renewal is a write."""
        stop = threading.Event()

        def keep() -> None:
            pause = self.lease_seconds / 3
            while not stop.wait(pause):
                try:
                    self.renew(self.db.get_session(session_id), token)
                except (LostClaim, SessionNotFound):
                    return
                except HangarError as exc:
                    logger.warning("could not renew the claim on %s (trying again): %s",
                                   session_id, exc.message)  # fmt: skip
                    pause = self.lease_seconds / 12
                else:
                    pause = self.lease_seconds / 3

        keeper = threading.Thread(target=keep, name=f"lease-{session_id}", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()

    def take_over(self, session: Session) -> Session:
        """Take an expired claim (same kind, a new token, this worker, one more try; the last
        try's error kept): the caller carries on or undoes the work. SessionBusy while the
        lease runs."""
        claim = session.claim
        if claim is None:
            raise InvalidState(f"session {session.name} holds no claim", session=session.name)
        if claim.until > self.clock():
            raise SessionBusy(f"session {session.name} is busy ({claim.kind.value} by "
                              f"{claim.by})", session=session.name)  # fmt: skip
        fresh = self._new_claim(claim.kind).model_copy(
            update={"tries": claim.tries + 1, "error": claim.error})
        try:
            written = self.db.update_session(session.model_copy(update={"claim": fresh}))
        except VersionConflict:
            raise SessionBusy(f"session {session.name} changed meanwhile", session=session.name
                              ) from None  # fmt: skip
        return self._granted(written)

    # -- starting -----------------------------------------------------------------------------

    def claim_start(self, session: Session, intent: StartIntent, **changes: Any) -> Session:
        """IDLE, SUSPENDED or FAILED to STARTING, with the start's intent and a claim; of two
        callers exactly one wins. ``changes`` go with it (a new harness, model)."""
        if intent.turn is not None:
            changes.setdefault("turn_count", intent.turn)
        return self._move(session, "claim_start", claim=self._new_claim(ClaimKind.START),
                          start=intent, start_error=None,
                          phase=Phase(step=StartStep.CREATING_SANDBOX), **changes)  # fmt: skip

    def advance(self, session: Session, token: str, step: StartStep, detail: str = "",
                **changes: Any) -> Session:  # fmt: skip
        """A start goes on to ``step`` (the lease renewed)."""
        phase = session.phase
        if phase is None or phase.step is not step or phase.detail != detail:
            phase = Phase(step=step, detail=detail)
        claim = session.claim.model_copy(update={"until": self._until()})  # type: ignore[union-attr]
        return self._move(session, "advance", token=token, claim=claim, phase=phase, **changes)

    def activate(self, session: Session, token: str, **changes: Any) -> Session:
        """STARTING to ACTIVE: the turn's harness runs."""
        return self._move(session, "activate", token=token, phase=None, start=None,
                          needs_input=None, error=None, progress=None, **changes)  # fmt: skip

    def ready(self, session: Session, token: str, **changes: Any) -> Session:
        """STARTING to IDLE: the sandbox is made and restored (open, fork)."""
        return self._move(session, "ready", token=token, phase=None, start=None, **changes)

    def turn_not_started(self, session: Session, token: str, error: str) -> Session:
        """STARTING to IDLE: the sandbox is ready but the harness would not start (the turn is
        FAILED; the sandbox stays, so nothing is lost)."""
        return self._move(session, "turn_not_started", token=token, phase=None, start=None,
                          error=error, last_summary=error)  # fmt: skip

    def fail_start(self, session: Session, token: str, error: StartError, **changes: Any) -> Session:
        """STARTING to FAILED with why (``send`` and ``open`` try again)."""
        return self._move(session, "fail_start", token=token, phase=None, start=None,
                          start_error=error, error=error.message,
                          last_summary=f"{error.what} failed: {error.message}", **changes)  # fmt: skip

    # -- turns --------------------------------------------------------------------------------

    def claim_finish(self, session: Session) -> Session:
        """Claim the end of the running turn (ACTIVE stays), so one caller finishes it and
        takes its one ``turn`` checkpoint. SessionBusy when someone's claim is live; an expired
        one is taken over, one more try, its error kept (as :meth:`take_over` does)."""
        claim = session.claim
        if claim is not None and claim.until > self.clock():
            raise SessionBusy(f"the turn of {session.name} is being finished",
                              session=session.name)  # fmt: skip
        fresh = self._new_claim(ClaimKind.FINISH_TURN)
        if claim is not None:
            fresh = fresh.model_copy(update={"tries": claim.tries + 1, "error": claim.error})
        return self._move(session, "claim_finish", claim=fresh)

    def finish_turn(self, session: Session, token: str, **changes: Any) -> Session:
        """ACTIVE to IDLE, by the holder of the finish claim; the turn's pending approvals and
        progress line go with it."""
        return self._move(session, "finish_turn", token=token, pending_approvals=[],
                          progress=None, **changes)  # fmt: skip

    def await_repair(self, session: Session, token: str) -> Session:
        """ACTIVE stays, the finish claim let go: the turn's repair run goes on, and the finish
        that follows it is claimed afresh."""
        return self._move(session, "await_repair", token=token, release=True)

    # -- suspending, archiving, losing the sandbox ---------------------------------------------

    def claim_suspend(self, session: Session) -> Session:
        """IDLE to SUSPENDING, claimed."""
        return self._move(session, "claim_suspend",
                          claim=self._new_claim(ClaimKind.SUSPEND))

    def suspended(self, session: Session, token: str) -> Session:
        """SUSPENDING to SUSPENDED: the checkpoint is taken and the sandbox gone."""
        return self._move(session, "suspended", token=token, sandbox_id=None,
                          sandbox_expires_at=None)  # fmt: skip

    def abort_suspend(self, session: Session, token: str, error: str) -> Session:
        """SUSPENDING back to IDLE, the sandbox kept: its checkpoint failed."""
        return self._move(session, "abort_suspend", token=token, error=error)

    def claim_archive(self, session: Session) -> Session:
        """IDLE, SUSPENDED or FAILED to SUSPENDING (for good), claimed."""
        return self._move(session, "claim_archive",
                          claim=self._new_claim(ClaimKind.ARCHIVE))

    def archived(self, session: Session, token: str) -> Session:
        return self._move(session, "archived", token=token, sandbox_id=None,
                          sandbox_expires_at=None)  # fmt: skip

    def lose_sandbox(self, session: Session) -> Session:
        """IDLE or ACTIVE to SUSPENDED: the sandbox is gone (its turn, if any, interrupted by
        the caller); the session resumes from its last checkpoint."""
        return self._move(session, "lose_sandbox", sandbox_id=None, sandbox_expires_at=None,
                          phase=None, start=None, pending_approvals=[],
                          progress=None)  # fmt: skip

    def extend(self, session: Session, **changes: Any) -> Session:
        """IDLE or ACTIVE, state unchanged: the sandbox's TTL, activity."""
        return self._move(session, "extend", **changes)

    def switch_harness(self, session: Session, **changes: Any) -> Session:
        """IDLE, SUSPENDED or FAILED, state unchanged: another harness or model for the next
        turn (never while a turn runs or a start is under way)."""
        return self._move(session, "switch_harness", **changes)

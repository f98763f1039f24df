"""The session state machine: every transition tried from every state, allowed or refused as
the table says, and claims that keep their holder honest."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidState, SessionBusy
from hangar.models import Claim, ClaimKind, Phase, Session, SessionState as S, StartError
from hangar.models import StartIntent, StartKind, StartStep, utcnow
from hangar.sessions.transitions import TRANSITIONS, LostClaim, Transitions

TOKEN = "t0ken"
ERROR = StartError(step=StartStep.CLONING, what="cloning the repo", message="no", code="x")
INTENT = StartIntent(kind=StartKind.OPEN)

CALLS: dict[str, Callable[[Transitions, Session], Session]] = {
    "claim_start": lambda t, s: t.claim_start(s, INTENT),
    "advance": lambda t, s: t.advance(s, TOKEN, StartStep.CLONING, "repo"),
    "activate": lambda t, s: t.activate(s, TOKEN),
    "ready": lambda t, s: t.ready(s, TOKEN),
    "turn_not_started": lambda t, s: t.turn_not_started(s, TOKEN, "no harness"),
    "fail_start": lambda t, s: t.fail_start(s, TOKEN, ERROR),
    "claim_finish": lambda t, s: t.claim_finish(s),
    "finish_turn": lambda t, s: t.finish_turn(s, TOKEN),
    "await_repair": lambda t, s: t.await_repair(s, TOKEN),
    "claim_suspend": lambda t, s: t.claim_suspend(s),
    "suspended": lambda t, s: t.suspended(s, TOKEN),
    "abort_suspend": lambda t, s: t.abort_suspend(s, TOKEN, "checkpoint failed"),
    "claim_archive": lambda t, s: t.claim_archive(s),
    "archived": lambda t, s: t.archived(s, TOKEN),
    "lose_sandbox": lambda t, s: t.lose_sandbox(s),
    "extend": lambda t, s: t.extend(s, sandbox_expires_at=utcnow()),
    "switch_harness": lambda t, s: t.switch_harness(s, harness="codex", harness_session=None),
}
NEEDS_A_CLAIM = {"advance", "activate", "ready", "turn_not_started", "fail_start",
                 "finish_turn", "await_repair", "suspended", "abort_suspend",
                 "archived"}  # fmt: skip


def test_every_transition_has_a_call_here() -> None:
    assert set(CALLS) == set(TRANSITIONS)


def in_state(db: SqliteDb, state: S, *, expired: bool = False) -> Session:
    """A stored session in ``state``, holding a claim (token TOKEN) when the state has one or
    a transition needs one; ``expired``: its lease ran out."""
    until = utcnow() + timedelta(seconds=-5 if expired else 60)
    claim = Claim(kind=ClaimKind.START, by="test", token=TOKEN, until=until)
    session = Session(name=f"s-{state.value}", environment="app", harness="claude",
                      state=state, claim=claim, phase=Phase(step=StartStep.CREATING_SANDBOX),
                      sandbox_id="sbx-00000000")  # fmt: skip
    return db.create_session(session)


@pytest.mark.parametrize("name", list(TRANSITIONS))
@pytest.mark.parametrize("state", list(S))
def test_each_transition_is_allowed_from_its_states_and_refused_from_every_other(
    db: SqliteDb, name: str, state: S
) -> None:
    transitions = Transitions(db, lease_seconds=60)
    allowed, to = TRANSITIONS[name]
    # An ACTIVE session with a live finisher's claim is busy; give the claims that a test of
    # claim_finish needs no live one.
    session = in_state(db, state, expired=name == "claim_finish")
    if state in allowed:
        moved = CALLS[name](transitions, session)
        assert moved.state is (to or state)
        assert db.get_session(session.id) == moved
        if to in (S.STARTING, S.SUSPENDING) or name == "claim_finish":
            assert moved.claim is not None and moved.claim.until > utcnow()
        elif (to is not None and to is not state) or name == "await_repair":
            assert moved.claim is None  # the work the claim covered is over
    else:
        with pytest.raises((SessionBusy, InvalidState)):
            CALLS[name](transitions, session)
        assert db.get_session(session.id) == session  # nothing changed


@pytest.mark.parametrize("name", sorted(NEEDS_A_CLAIM))
def test_a_transition_of_claimed_work_is_refused_to_whoever_lost_the_claim(
    db: SqliteDb, name: str
) -> None:
    transitions = Transitions(db, lease_seconds=60)
    [state] = sorted(TRANSITIONS[name][0])[:1]
    session = in_state(db, state)
    stolen = db.update_session(session.model_copy(update={
        "claim": session.claim.model_copy(update={"token": "someone-else"})}))  # type: ignore[union-attr]
    with pytest.raises(LostClaim):
        CALLS[name](transitions, stolen)
    assert db.get_session(session.id) == stolen


def test_two_claims_of_one_session_exactly_one_wins(db: SqliteDb) -> None:
    transitions = Transitions(db, lease_seconds=60)
    session = in_state(db, S.IDLE)
    transitions.claim_suspend(session)
    with pytest.raises(SessionBusy):
        transitions.claim_start(session, INTENT)  # read before the first claim: stale


def test_a_live_claim_cannot_be_taken_over_and_an_expired_one_can(db: SqliteDb) -> None:
    transitions = Transitions(db, lease_seconds=60)
    live = in_state(db, S.STARTING)
    with pytest.raises(SessionBusy):
        transitions.take_over(live)
    expired = db.update_session(live.model_copy(update={
        "claim": live.claim.model_copy(update={"until": utcnow() - timedelta(seconds=1)})}))  # type: ignore[union-attr]
    taken = transitions.take_over(expired)
    assert taken.claim and taken.claim.token != TOKEN and taken.claim.kind is ClaimKind.START
    with pytest.raises(LostClaim):
        transitions.advance(taken, TOKEN, StartStep.CLONING)  # the old holder, come back


def test_a_renewed_lease_runs_on(db: SqliteDb) -> None:
    transitions = Transitions(db, lease_seconds=60)
    session = in_state(db, S.SUSPENDING)
    short = db.update_session(session.model_copy(update={
        "claim": session.claim.model_copy(update={"until": utcnow() + timedelta(seconds=1)})}))  # type: ignore[union-attr]
    renewed = transitions.renew(short, TOKEN)
    assert renewed.claim and renewed.claim.until > utcnow() + timedelta(seconds=50)
    with pytest.raises(LostClaim):
        transitions.renew(renewed, "not-mine")

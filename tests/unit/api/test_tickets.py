"""Terminal tickets on a real db: valid until their minute is up, once, and only tickets."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from hangar.api import tickets
from hangar.operations.auth import ADMIN, authenticate, secret_hash
from hangar.db.sqlite import SqliteDb
from hangar.errors import Forbidden, Unauthorized
from hangar.models import Session, Token, utcnow
from hangar.testing.db import T0, make_session


@pytest.fixture
def db() -> Iterator[SqliteDb]:
    opened = SqliteDb(":memory:")
    yield opened
    opened.close()


def session(db: SqliteDb, name: str = "demo") -> Session:
    return db.create_session(make_session(name, environment="app", harness="claude"))


def test_a_ticket_is_good_until_just_before_it_expires_and_only_once(db: SqliteDb) -> None:
    demo = session(db)
    made = tickets.issue(db, demo, now=T0)
    assert made.expires_at == T0 + timedelta(seconds=tickets.TICKET_SECONDS)
    just_before = made.expires_at - timedelta(microseconds=1)
    assert tickets.redeem(db, made.secret, now=just_before) == demo.id
    with pytest.raises(Unauthorized, match="used already"):
        tickets.redeem(db, made.secret, now=T0)
    late = tickets.issue(db, demo, now=T0)
    with pytest.raises(Unauthorized, match="expired"):
        tickets.redeem(db, late.secret, now=late.expires_at)
    assert db.list_tokens() == []  # used up even so
    with pytest.raises(Unauthorized, match="required"):
        tickets.redeem(db, None)


def test_redeeming_a_bearer_token_refuses_it_and_leaves_it_alone(db: SqliteDb) -> None:
    admin = db.create_token(Token(secret_hash=secret_hash("admin-secret"), scopes=[ADMIN]))
    with pytest.raises(Unauthorized, match="not a terminal ticket"):
        tickets.redeem(db, "admin-secret")
    assert db.list_tokens() == [admin]


def test_making_a_ticket_sweeps_only_expired_tickets(db: SqliteDb) -> None:
    demo = session(db)
    old = db.create_token(Token(secret_hash=secret_hash("old"), scopes=[ADMIN],
                                expires_at=T0))  # fmt: skip
    stale = tickets.issue(db, demo, now=T0)
    live = tickets.issue(db, demo, now=T0 + timedelta(seconds=30))
    newest = tickets.issue(db, demo, now=stale.expires_at)
    kept = {t.secret_hash for t in db.list_tokens()}
    assert kept == {old.secret_hash, secret_hash(live.secret), secret_hash(newest.secret)}


def test_a_ticket_is_no_bearer_token_and_an_expired_bearer_token_is_refused(db: SqliteDb) -> None:
    made = tickets.issue(db, session(db))
    with pytest.raises(Forbidden):
        authenticate(db, f"Bearer {made.secret}")
    gone = utcnow() - timedelta(seconds=1)
    db.create_token(Token(secret_hash=secret_hash("gone"), scopes=[ADMIN], expires_at=gone))
    with pytest.raises(Unauthorized, match="expired"):
        authenticate(db, "Bearer gone")

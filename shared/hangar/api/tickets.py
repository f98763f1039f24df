"""Terminal tickets: a short-lived, single-use secret that opens one session's terminal, so a
browser never puts the bearer token in a URL.

A ticket is a :class:`~hangar.models.Token` record like any other (only its secret's SHA-256 is
stored, in the db every server instance shares), with the one scope ``terminal:<session id>``
and an ``expires_at`` :data:`TICKET_SECONDS` after it was made. Lacking the admin scope, it is
never a bearer token for the API. Redeeming takes it out of the db in one transaction
(:meth:`~hangar.db.Db.take_token`), so of two attempts with one ticket exactly one gets in,
and it is used up by the first attempt whatever happens next. Making a ticket first deletes the
tickets that expired unused (tokens are few: the admin's and the live tickets).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from hangar.operations.auth import secret_hash
from hangar.db import Db
from hangar.errors import TokenNotFound, Unauthorized
from hangar.models import Session, Token, utcnow

TICKET_SECONDS: Final = 60
"""How long a ticket can be redeemed after it was made."""

SCOPE_PREFIX: Final = "terminal:"


def scope_for(session_id: str) -> str:
    """The one scope of a ticket for this session's terminal."""
    return SCOPE_PREFIX + session_id


def _ticket_session(token: Token) -> str | None:
    """The session a ticket is for; None for a token that is no ticket."""
    for scope in token.scopes:
        if scope.startswith(SCOPE_PREFIX):
            return scope.removeprefix(SCOPE_PREFIX)
    return None


@dataclass(frozen=True)
class Ticket:
    secret: str
    expires_at: datetime


def issue(db: Db, session: Session, now: datetime | None = None) -> Ticket:
    """A new ticket for ``session``'s terminal, valid for TICKET_SECONDS from ``now``. Tickets
    that expired unused are deleted first (a ticket someone takes meanwhile is simply gone)."""
    now = now or utcnow()
    for token in db.list_tokens():
        if _ticket_session(token) is not None and token.expired(now):
            db.delete_token(token.id)
    secret = secrets.token_urlsafe(32)
    expires_at = now + timedelta(seconds=TICKET_SECONDS)
    db.create_token(Token(secret_hash=secret_hash(secret), scopes=[scope_for(session.id)],
                          label=f"terminal ticket: {session.name}", created_at=now,
                          expires_at=expires_at))  # fmt: skip
    return Ticket(secret, expires_at)


def redeem(db: Db, secret: str | None, now: datetime | None = None) -> str:
    """Use up the ticket ``secret`` and return the id of the session it is for. Unauthorized
    (the ticket gone either way) when there is none, when it is unknown or used already, or
    when it has expired. A secret that names a token other than a ticket (the admin token, say)
    is refused too, and that token left alone."""
    if not secret:
        raise Unauthorized("a terminal ticket is required (?ticket=TICKET): get one with POST "
                           "/api/sessions/{ref}/terminal-ticket")  # fmt: skip
    hashed = secret_hash(secret)
    used = Unauthorized("the terminal ticket is not valid: unknown, or used already (each "
                        "opens one terminal); get a new one")  # fmt: skip
    try:
        # Look before taking: taking deletes, and a bearer token must never be taken here.
        found = db.find_token(hashed)
        if _ticket_session(found) is None:
            raise Unauthorized("that is not a terminal ticket: get one with POST "
                               "/api/sessions/{ref}/terminal-ticket")  # fmt: skip
        token = db.take_token(hashed)
    except TokenNotFound:
        raise used from None
    session_id = _ticket_session(token)
    if session_id is None:  # tokens never change, so this cannot be: the check is for types
        raise used
    if token.expired(now or utcnow()):
        raise Unauthorized(f"the terminal ticket has expired (it is valid for {TICKET_SECONDS} "
                           "seconds); get a new one")  # fmt: skip
    return session_id

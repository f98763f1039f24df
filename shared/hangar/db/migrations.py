"""Bringing records written by an older hangar up to this one's, once, not on every read.

Contract: :func:`migrate` is idempotent and safe while the control plane runs (each change is
a compare-and-set re-read on a concurrent write); ``hangar serve`` runs it at start, and
``hangar migrate`` runs it against a deployment's database. It works on the db port alone (no
part of the session service), so the CLI's ``migrate`` loads nothing of the server.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hangar.db import Db
from hangar.db.records import modify_session
from hangar.errors import SessionNotFound
from hangar.models import MAX_IDLE_MINUTES, Conversation, Session

logger = logging.getLogger(__name__)

_PAGE = 500


def migrate(db: Db) -> int:
    """Bring every session record up to this version; returns how many changed:

    - the turn count and last summary that lists read from the record, filled in from its
      turns on records from before they were kept there (the rewrite also gives a Firestore
      document the ``environment`` field that finding an environment's sessions queries);
    - the conversation of the session's harness kept per harness too (what a switch of
      harness and back relies on), for records from before there could be several;
    - an idle timeout outside 0 to a week (which an older hangar stored, and which then broke
      every sandbox lease computed from it) set to a week;
    - a session the order by activity does not find (a Firestore document written before
      ``last_active_at`` was a field of it) written again as it is, which gives it the field.
    """
    changed = 0
    every = db.list_sessions()
    unlisted = {s.id for s in every} - _by_activity(db)
    for session in every:
        stale = session.id in unlisted
        if not stale and not _upgrade(db, session):
            continue

        def upgrade(current: Session, stale: bool = stale) -> Mapping[str, Any] | None:
            again = {"last_active_at": current.last_active_at} if stale else None
            return _upgrade(db, current) or again

        try:
            modify_session(db, session.id, upgrade)
        except SessionNotFound:  # deleted meanwhile
            continue
        changed += 1
    if changed:
        logger.info("brought %d session record(s) up to date", changed)
    return changed


def _by_activity(db: Db) -> set[str]:
    """The ids of every session paging by activity finds."""
    found: set[str] = set()
    after = None
    while page := db.page_sessions(_PAGE, after, order="activity"):
        found.update(s.id for s in page)
        after = (page[-1].last_active_at, page[-1].id)
    return found


def _upgrade(db: Db, session: Session) -> Mapping[str, Any] | None:
    """The changes ``session`` needs (None: it is up to date)."""
    changes: dict[str, Any] = {}
    if session.turn_count is None:
        turns = db.list_turns(session.id)
        finished = [t for t in turns if t.finished_at is not None]
        changes["turn_count"] = turns[-1].n if turns else 0
        changes["last_summary"] = finished[-1].summary if finished else None
    if session.harness_session and session.harness not in session.conversations:
        last = changes.get("turn_count", session.turn_count) or 0
        changes["conversations"] = {**session.conversations, session.harness: Conversation(
            id=session.harness_session, last_turn=last)}  # fmt: skip
    if not 0 <= session.idle_minutes <= MAX_IDLE_MINUTES:  # NaN too
        changes["idle_minutes"] = float(MAX_IDLE_MINUTES)
    return changes or None

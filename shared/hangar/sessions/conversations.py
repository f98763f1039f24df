"""A session's conversations: one per harness it has used, and what each turn's prompt is.

A session runs one harness at a time (``session.harness``) but keeps the conversation of every
harness it has used (``session.conversations``: the conversation id and the last turn it ran).
``harness_session`` is always the current harness's conversation, or None when it has none yet.
A turn on a harness:

- with a conversation of its own, and no turn since on another harness: resumes it natively;
- with a conversation of its own, and turns since on other harnesses: resumes it, the prompt
  opening with an account of the turns it missed (``handoff`` on the turn);
- without one, in a fork of a session on the same harness that can fork: forks natively;
- without one, and with history (earlier turns, or the source's turns for a fork): starts a
  new conversation whose prompt opens with the handoff account (``handoff``);
- without one and without history: starts a new conversation with the message alone.

Every checkpoint archives the conversation folders of every harness the session has a
conversation with, so a switch back finds its conversation after a suspend too.
"""

from __future__ import annotations

from typing import Any

from hangar.errors import InvalidInput
from hangar.harnesses import Harness, get_harness
from hangar.harnesses.handoff import TurnRecord, catch_up_prompt, handoff_prompt
from hangar.models import Conversation, Session, Turn


def switch(session: Session, harness: str | None, model: str | None) -> dict[str, Any]:
    """The record's changes for a move to ``harness`` and ``model`` (None: keep it; a new
    harness clears the model unless one is given). UnknownHarness for a harness hangar does
    not know; nothing when neither is given."""
    changes: dict[str, Any] = {}
    if model is not None and not model.strip():
        raise InvalidInput("the model is empty", field="model")
    if harness is not None and harness != session.harness:
        get_harness(harness)
        own = session.conversations.get(harness)
        # fork_from names a conversation of the old harness: the new one cannot fork it
        changes.update(harness=harness, model=model, fork_from=None,
                       harness_session=own.id if own else None)  # fmt: skip
    elif model is not None:
        changes["model"] = model
    return changes


def conversation_dirs(session: Session) -> tuple[str, ...]:
    """The folders under HOME a checkpoint of the session carries: those of its harness and of
    every harness it has a conversation with, each once."""
    names = [session.harness, *sorted(set(session.conversations) - {session.harness})]
    return tuple(dict.fromkeys(d for name in names for d in get_harness(name).conversation_dirs))


def prompt(
    session: Session, harness: Harness, turn: Turn, earlier: list[Turn], source: list[Turn]
) -> tuple[str, bool]:
    """Turn ``turn``'s prompt on ``harness`` and whether it carries a (lossy) account.
    ``earlier`` are the session's turns before it; ``source`` the turns of the session it was
    forked from, up to the fork (empty for a session that is not a fork)."""
    own = session.conversations.get(harness.name)
    if session.harness_session:
        last = own.last_turn if own else 0
        missed = [t for t in earlier if t.n > last and t.harness not in (None, harness.name)]
        if not missed:
            return turn.message, False
        return catch_up_prompt(turn.message, _records(missed), first=missed[0].n,
                               branch=session.branch), True  # fmt: skip
    if session.fork_from and harness.can_fork:
        return turn.message, False
    history = [*source, *earlier]
    if not history:
        return turn.message, False
    return handoff_prompt(turn.message, _records(history), branch=session.branch), True


def after_turn(session: Session, turn: Turn, harness: str) -> dict[str, Conversation]:
    """The conversations once ``turn`` went well on ``harness``: its id, and the turn as the
    last it ran."""
    assert turn.harness_session is not None
    return {**session.conversations,
            harness: Conversation(id=turn.harness_session, last_turn=turn.n)}  # fmt: skip


def _records(turns: list[Turn]) -> list[TurnRecord]:
    return [TurnRecord(t.message, t.summary, t.harness) for t in turns]

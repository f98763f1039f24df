"""Handoff (spec 000 §5.5): carrying a session to a harness that cannot resume its conversation.

Used when a session moves to a harness it has no conversation with (``send --harness``, ``open
--harness``), and for the first turn of a fork whose harness cannot fork. The new turn's prompt
opens with a compact account of the session: the original task, each turn's message and
summary, the branch, and the last check result. Coming back to a harness the session used
before resumes that harness's own conversation, and the prompt opens with an account of the
turns it missed instead. Either account is lossy next to a native resume, and says so, in the
prompt and to the caller (``handoff`` on the turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MARKER = "[hangar handoff: lossy]"
_MAX_FIELD = 2000


@dataclass(frozen=True)
class TurnRecord:
    """One earlier turn as an account tells it; ``harness`` ran it, when known."""

    message: str
    summary: str | None
    harness: str | None = None


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_FIELD else text[:_MAX_FIELD] + " [...]"


def _turn_lines(turns: Sequence[TurnRecord], first: int = 1) -> list[str]:
    lines = []
    for n, turn in enumerate(turns, first):
        by = f" ({turn.harness})" if turn.harness else ""
        lines.append(f"{n}. Asked{by}: {_clip(turn.message)}")
        lines.append(f"   Result: {_clip(turn.summary) if turn.summary else '(no summary)'}")
    return lines


def handoff_prompt(
    message: str,
    turns: Sequence[TurnRecord],
    *,
    branch: str,
    last_check: str | None = None,
) -> str:
    """The prompt for a turn that cannot resume natively: the account, then ``message``."""
    lines = [
        MARKER,
        "You are continuing a session that another agent (or an earlier conversation) worked on.",
        "This is a summary, not the full conversation: details beyond it are lost.",
        "",
        f"Original task: {_clip(turns[0].message) if turns else _clip(message)}",
        f"Branch: {branch} (the repository is checked out on it, with the earlier work in place)",
    ]
    if last_check:
        lines.append(f"Last check result: {_clip(last_check)}")
    if turns:
        lines += ["", "Turns so far:", *_turn_lines(turns)]
    lines += ["", "Now the next request:", message]
    return "\n".join(lines)


def catch_up_prompt(
    message: str, missed: Sequence[TurnRecord], *, first: int, branch: str
) -> str:
    """The prompt for a turn that resumes its harness's own conversation after other agents
    worked on the session: an account of the turns it missed (numbered from ``first``), then
    ``message``."""
    lines = [
        MARKER,
        "Since your last turn in this conversation, another agent worked on this session.",
        "This is a summary of what it did, not its conversation: details beyond it are lost.",
        f"Branch: {branch} (the repository is checked out on it, with that work in place)",
        "",
        "Turns you missed:",
        *_turn_lines(missed, first),
        "",
        "Now the next request:",
        message,
    ]
    return "\n".join(lines)

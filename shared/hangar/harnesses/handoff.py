"""Handoff (spec 000 §5.5): carrying a session to a harness that cannot resume its conversation.

Used when a harness has no native resume (or fork), or when a session is reopened with another
harness. The new turn's prompt opens with a compact account of the session: the original task,
each turn's message and summary, the branch, and the last check result. It is lossy next to a
native resume, and says so, in the prompt and to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MARKER = "[hangar handoff: lossy]"
_MAX_FIELD = 2000


@dataclass(frozen=True)
class TurnRecord:
    message: str
    summary: str | None


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_FIELD else text[:_MAX_FIELD] + " [...]"


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
        lines += ["", "Turns so far:"]
        for n, turn in enumerate(turns, 1):
            lines.append(f"{n}. Asked: {_clip(turn.message)}")
            lines.append(f"   Result: {_clip(turn.summary) if turn.summary else '(no summary)'}")
    lines += ["", "Now the next request:", message]
    return "\n".join(lines)

"""Where the exchange folder is, what a turn's prompt says about it, and getting it ready.

``$HANGAR_IO`` is ``~/.hangar/sessions/<name>`` in the sandbox, the agent's own folder::

    in/<turn>/          attachments for the turn
    RESULT.md           the summary for the people who asked
    out/result.json     the structured result
    out/QUESTION.md     a question: the turn ends as needs_input (out/QUESTION.json: options)
    out/progress.jsonl  progress lines
    out/artifacts/**    files handed back (they stay from turn to turn)

Before each turn :func:`prepare` clears ``out/`` (but ``out/artifacts/``) and ``RESULT.md``, as
the agent: the folder is the agent's, so nothing hangar does there runs with more rights than
the agent has. The folder is checkpointed as a part of its own (``exchange_dir``), so it
survives suspend and resume. The ``hangar-agent`` helper is installed with hangar's scripts
(:func:`hangar.agent.install`) into hangar's own bin folder, which comes first on PATH for
everything the agent runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from hangar.errors import SandboxError
from hangar.exchange.note import NOTE_CLOSE, NOTE_OPEN
from hangar.models import Session
from hangar.sandboxes import HOME, Sandboxes



def exchange_dir(session: Session) -> str:
    """The session's exchange folder relative to HOME (how checkpoints name it)."""
    return f".hangar/sessions/{session.name}"


def io_path(session: Session) -> str:
    """``$HANGAR_IO``: the session's exchange folder inside the sandbox."""
    return f"{HOME}/{exchange_dir(session)}"


def turn_env(session: Session) -> dict[str, str]:
    """What every turn's environment gets from the exchange (after the environment's own)."""
    return {"HANGAR_IO": io_path(session)}


_PREPARE = """
set -e
io="$1"
mkdir -p "$io/in" "$io/out/artifacts"
find "$io/out" -mindepth 1 -maxdepth 1 ! -name artifacts -exec rm -rf -- {} +
rm -rf -- "$io/RESULT.md"
"""


def prepare(sandboxes: Sandboxes, session: Session) -> None:
    """Ready the exchange folder for a turn, as the agent (see the module doc)."""
    assert session.sandbox_id is not None
    result = sandboxes.exec(session.sandbox_id, ["sh", "-c", _PREPARE, "sh", io_path(session)])
    if not result.ok:
        raise SandboxError(f"cannot ready $HANGAR_IO for the turn: "
                           f"{result.stderr.decode(errors='replace').strip()[-300:]}")  # fmt: skip


def prompt_note(session: Session, schema: dict[str, object] | None,
                extra: Sequence[str] = ()) -> str:  # fmt: skip
    """The lines a turn's prompt ends with: where $HANGAR_IO is and how to hand work back, and
    with ``schema``, the result asked for; then ``extra`` (what came with the turn). Wrapped
    in one element, as harnesses wrap the
    context they add, so it reads as instructions rather than as the person's message."""
    lines = [
        f"hangar: your exchange folder is $HANGAR_IO ({io_path(session)}). Use the "
        "hangar-agent command to hand work back:",
        "  hangar-agent done SUMMARY        the summary for the people who asked",
        "  hangar-agent progress [--pct N] MESSAGE   a progress line while you work",
        "  hangar-agent ask QUESTION        when you need a decision (then end your turn)",
        "  hangar-agent artifact PATH [NAME]         hand back a file or folder",
        "  hangar-agent result JSON         the structured result",
    ]
    if schema is not None:
        lines.append("This turn needs a structured result: save it with `hangar-agent result` "
                     "(it lands in $HANGAR_IO/out/result.json) as JSON valid against this "
                     "JSON Schema: " + json.dumps(schema, separators=(",", ":")))  # fmt: skip
    lines += extra
    return NOTE_OPEN + "\n" + "\n".join(lines) + "\n" + NOTE_CLOSE


def with_note(prompt: str, session: Session, schema: dict[str, object] | None,
              extra: Sequence[str] = ()) -> str:  # fmt: skip
    return f"{prompt}\n\n{prompt_note(session, schema, extra)}"

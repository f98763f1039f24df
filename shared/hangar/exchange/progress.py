"""Progress lines a turn writes to ``out/progress.jsonl`` (``hangar-agent progress``), read
from a byte cursor while the turn runs. Each line is untrusted: a line that is not a JSON
object with a message is skipped; ``pct`` is kept only as a number from 0 to 100; messages are
redacted and cut to :data:`MAX_MESSAGE` characters."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from hangar import agent
from hangar.errors import SandboxError
from hangar.models import Session
from hangar.redact import redact
from hangar.sandboxes import Sandboxes, SandboxUser
from hangar.exchange.layout import io_path

MAX_MESSAGE = 500
MAX_READ = 64 << 10


@dataclass(frozen=True)
class ProgressLine:
    message: str
    pct: float | None = None


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore")
    size: int = 0
    cursor: int = 0
    lines: list[str] = []


def progress_file(session: Session) -> str:
    """Where the session's progress lines are, inside its sandbox (the agent's file: its stamp
    says when to read it again, :mod:`hangar.processes.following`)."""
    return f"{io_path(session)}/out/progress.jsonl"


def read_progress(
    sandboxes: Sandboxes, session: Session, cursor: int
) -> tuple[list[ProgressLine], int]:
    """The progress lines after ``cursor`` and the cursor after them. A file cleared for a new
    turn is read from its start. SandboxError when the sandbox cannot be read."""
    assert session.sandbox_id is not None
    result = agent.run_script(sandboxes, session.sandbox_id, "exchange", "progress",
                              io_path(session), str(cursor), str(MAX_READ),
                              user=SandboxUser.HANGAR, timeout=30)  # fmt: skip
    if not result.ok:
        raise SandboxError("cannot read the turn's progress: "
                           + result.stderr.decode(errors="replace").strip()[-200:])  # fmt: skip
    try:
        read = _Read.model_validate_json(result.stdout)
    except (ValidationError, ValueError):
        return [], cursor
    return [p for p in map(parse_line, read.lines) if p is not None], read.cursor


def parse_line(line: str) -> ProgressLine | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        return None
    message = redact(" ".join(value["message"].split())[:MAX_MESSAGE]) or ""
    raw = value.get("pct")
    pct = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw <= 100:
        pct = float(raw)
    return ProgressLine(message, pct) if message else None

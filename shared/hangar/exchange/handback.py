"""What a turn left in ``$HANGAR_IO``, read once it has ended.

hangar's in-sandbox script (:mod:`hangar.agent.exchange`, as hangar's uid) reads the folder
without following links and within caps, and answers one JSON object; :func:`parse` reads that
answer as untrusted input: anything malformed is dropped with a warning, never an exception.
The question's options are redacted and held to :data:`MAX_OPTIONS` of at most
:data:`MAX_OPTION_CHARS` characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from hangar import agent
from hangar.config import Settings
from hangar.models import Session
from hangar.redact import redact
from hangar.sandboxes import Sandboxes, SandboxUser
from hangar.exchange.layout import io_path

MAX_OPTIONS = 5
MAX_OPTION_CHARS = 80
MAX_WARNINGS = 50


@dataclass(frozen=True)
class Found:
    """A regular file under ``out/artifacts`` (``sha256`` None: over the size cap, not read)."""

    path: str
    size: int
    sha256: str | None


@dataclass(frozen=True)
class Handback:
    """What the agent handed back. ``result_text`` is the raw ``out/result.json`` (None when
    absent or over the cap: ``result_too_large``)."""

    summary: str | None = None
    result_present: bool = False
    result_text: str | None = None
    result_too_large: bool = False
    question: str | None = None
    options: list[str] = field(default_factory=list)
    artifacts: list[Found] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def result(self, max_bytes: int) -> tuple[Any, str | None]:
        """The parsed result and why there is none: (value, None) or (None, reason)."""
        if self.result_too_large:
            return None, f"out/result.json is over {max_bytes >> 10} KiB"
        if not self.result_present or self.result_text is None:
            return None, "no out/result.json was handed back"
        try:
            return json.loads(self.result_text), None
        except ValueError as exc:
            return None, f"out/result.json is not JSON: {exc}"


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore")
    present: bool = False
    size: int = 0
    too_large: bool = False
    text: str | None = None


class _Artifact(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str
    size: int
    sha256: str | None = None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: str | None = None
    result: _Result = _Result()
    question: str | None = None
    question_json: str | None = None
    artifacts: list[_Artifact] = []
    warnings: list[str] = []


def collect(sandboxes: Sandboxes, session: Session, settings: Settings) -> Handback:
    """Read the session's exchange folder (see the module doc)."""
    assert session.sandbox_id is not None
    result = agent.run_script(sandboxes, session.sandbox_id, "exchange", "collect",
                              io_path(session), str(settings.max_result_bytes),
                              str(settings.max_artifact_bytes), user=SandboxUser.HANGAR,
                              timeout=120)  # fmt: skip
    if not result.ok:
        reason = result.stderr.decode(errors="replace").strip()[-300:]
        return Handback(warnings=[f"$HANGAR_IO could not be read: {reason}"])
    return parse(result.stdout)


def parse(raw: bytes) -> Handback:
    """The script's answer, defensively (see the module doc)."""
    try:
        answer = _Answer.model_validate_json(raw)
    except (ValidationError, ValueError) as exc:
        return Handback(warnings=[f"$HANGAR_IO's reading made no sense: {str(exc)[:200]}"])
    warnings = [w[:300] for w in answer.warnings[:MAX_WARNINGS]]
    options, why = _options(answer.question_json)
    if why:
        warnings.append(why)
    question = (answer.question or "").strip() or None
    return Handback(
        summary=(answer.summary or "").strip() or None,
        result_present=answer.result.present,
        result_text=answer.result.text,
        result_too_large=answer.result.too_large,
        question=redact(question),
        options=options if question else [],
        artifacts=[Found(a.path, a.size, a.sha256) for a in answer.artifacts],
        warnings=warnings,
    )


def _options(raw: str | None) -> tuple[list[str], str | None]:
    if not raw:
        return [], None
    try:
        value = json.loads(raw)
    except ValueError:
        return [], "out/QUESTION.json is not JSON: its options were left out"
    options = value.get("options") if isinstance(value, dict) else None
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return [], "out/QUESTION.json has no list of options: they were left out"
    kept = [" ".join(o.split())[:MAX_OPTION_CHARS] for o in options[:MAX_OPTIONS]]
    kept = [redact(o) or "" for o in kept if o.strip()]
    why = None
    if len(options) > MAX_OPTIONS or any(len(o) > MAX_OPTION_CHARS for o in options):
        why = (f"out/QUESTION.json: at most {MAX_OPTIONS} options of at most "
               f"{MAX_OPTION_CHARS} characters are kept")  # fmt: skip
    return kept, why

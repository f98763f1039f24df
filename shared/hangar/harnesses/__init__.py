"""Harness adapters: how each agent CLI runs one turn, resumes, forks and reports back.

An adapter knows its CLI's command line (first turn, resumed turn, fork), its non-interactive
permission flags (the sandbox is the boundary), the conversation folders under HOME that a
checkpoint must carry (and nothing else of HOME), how to read the turn's outcome from the CLI's
JSON output, and the command a person runs to resume interactively (:meth:`Harness.interactive`,
the terminal's ``mode=agent``; :meth:`Harness.resume_hint` for people). Adapters are pure: they
build commands and parse output; running them detached in a sandbox is :mod:`.runs`.

Every adapter checks its turn after the fact (:meth:`Harness.outcome`): a missing CLI, a
non-zero exit, output with no conversation id, or a conversation other than the one asked for
is a typed :class:`~hangar.errors.HarnessError` recorded as the turn's outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hangar.errors import (
    ConversationMismatch,
    HarnessError,
    HarnessMissing,
    InvalidInput,
    NoConversationId,
    UnknownHarness,
)
from hangar.exchange.note import without_note

MISSING_EXIT = 127


@dataclass(frozen=True)
class TurnSpec:
    """One turn to run.

    ``conversation_id`` resumes that conversation; ``fork_from`` starts a new conversation that
    branches off that one; with neither, the turn starts a new conversation. ``new_id`` is the
    id hangar picks for a new or forked conversation where the CLI lets it choose (Claude Code).
    """

    prompt: str
    cwd: str
    model: str | None = None
    conversation_id: str | None = None
    fork_from: str | None = None
    new_id: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    asks: bool = False
    """Whether the harness asks before each command and edit (a live turn only: hangar's driver
    publishes each request for a person's decision); else it asks nothing."""


@dataclass(frozen=True)
class Invocation:
    """The command for a turn: ``argv`` with ``env`` added to the turn's environment, reading
    ``stdin`` (the turn's message, which is never an argument: a message that starts with a
    dash would be taken for an option, and one argument is at most 128 KiB)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None


@dataclass(frozen=True)
class LiveInvocation:
    """A live turn's CLI (:mod:`hangar.agent.driver`): ``argv`` started by the driver as the
    agent, with ``env`` added to the turn's environment, spoken to through the harness's
    adapter (the driver's ``harness``) made with ``options``. The message goes through the
    adapter, never on a command line."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnResult:
    """What a finished turn reported. ``error`` is set when the turn failed."""

    exit_code: int
    conversation_id: str | None
    summary: str | None
    usage: dict[str, int] = field(default_factory=dict)
    error: HarnessError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Harness(Protocol):
    name: str
    binary: str
    conversation_dirs: tuple[str, ...]
    can_resume: bool
    can_fork: bool
    can_steer: bool
    """Whether its turns can run live (:meth:`live` gives a command)."""
    can_ask: bool
    """Whether a live turn of it can ask before each command and edit (``TurnSpec.asks``)."""
    max_message_bytes: int | None
    """The largest message the CLI can be given (None: no limit of its own)."""

    def command(self, spec: TurnSpec) -> Invocation:
        """The command for ``spec``; raises HarnessError for a request it cannot honour."""
        ...

    def live(self, spec: TurnSpec) -> LiveInvocation | None:
        """The command for ``spec`` as a live turn, which hangar's driver can steer and
        interrupt while it runs; None for a CLI that has no live mode (its turns are one-shot:
        :meth:`command`). Its run log reads as :meth:`command`'s would, so :meth:`outcome`
        reads either. HarnessError for a request it cannot honour."""
        ...

    def home_files(self, spec: TurnSpec) -> dict[str, dict[str, Any]]:
        """The settings the turn needs in the CLI's own configuration files: path under HOME
        (``.toml`` or ``.json``) -> the keys to set, as nested tables. They are merged into what
        the file holds (the environment's setup's, an image's defaults), never written over it
        (:func:`hangar.harnesses.turns.write_home_files`). Derived from the turn's environment;
        never conversation folders, never secrets' values."""
        ...

    def outcome(self, spec: TurnSpec, exit_code: int, stdout: bytes, stderr: bytes) -> TurnResult:
        """Read the turn's outcome from the CLI's output and check it (see the module doc)."""
        ...

    def interactive(self, spec: TurnSpec) -> Invocation:
        """The command that carries on conversation ``spec.conversation_id`` interactively in
        a terminal (``spec.prompt`` is not used), with the model and endpoint settings a turn
        of ``spec`` would get: a person answers the CLI's own prompts there. InvalidInput
        without a conversation id; HarnessError for a request it cannot honour."""
        ...

    def resume_hint(self, conversation_id: str) -> str:
        """What a person types in the sandbox's terminal to carry on interactively."""
        ...


def conversation_of(harness: Harness, spec: TurnSpec) -> str:
    """The conversation an interactive resume carries on; InvalidInput when ``spec`` has none."""
    if not spec.conversation_id:
        raise InvalidInput(f"an interactive {harness.name} resume needs a conversation id "
                           "(TurnSpec.conversation_id)", harness=harness.name)  # fmt: skip
    return spec.conversation_id


def json_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects among the lines of ``data``; other lines are skipped."""
    for line in data.splitlines():
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def text_of(content: object) -> str:
    """The text of a message's content: a string, or the text blocks of a block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(parts)
    return ""


def int_fields(raw: object) -> dict[str, int]:
    """The integer fields of a usage object (token counts); anything else is dropped."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def result_event(
    event: dict[str, Any], summary: str | None
) -> tuple[str | None, dict[str, int], str | None]:
    """A stream-json ``result`` event (Claude Code, and Antigravity as assumed): the summary
    (its text, else ``summary``), its usage, and the failure it reports, if any."""
    text = event.get("result")
    if isinstance(text, str) and text:
        summary = text
    failure = str(text or event.get("subtype") or "error") if event.get("is_error") else None
    return summary, int_fields(event.get("usage")), failure


def check(
    harness: Harness,
    spec: TurnSpec,
    exit_code: int,
    stderr: bytes,
    conversation_id: str | None,
    summary: str | None,
    usage: dict[str, int],
    failure: str | None = None,
    chosen_id: str | None = None,
) -> TurnResult:
    """The checks every adapter applies after a turn, in order of precedence. ``chosen_id`` is
    the id the adapter told the CLI to give a new or forked conversation, if it could."""
    # What the CLI says goes to people: hangar's own note never does, should it quote the prompt.
    detail = without_note(stderr.decode(errors="replace").strip()[-1000:])
    summary = without_note(summary) if summary else summary
    failure = without_note(failure) if failure else failure
    error: HarnessError | None = None
    if exit_code == MISSING_EXIT and (not conversation_id) and (
        "not found" in detail or "No such file" in detail or not detail
    ):
        error = HarnessMissing(
            f"the {harness.name} CLI ({harness.binary}) is not installed in the sandbox",
            harness=harness.name,
        )
    elif exit_code != 0 or failure:
        reason = failure or detail or "no output"
        error = HarnessError(
            f"{harness.name} exited with status {exit_code}: {reason}",
            harness=harness.name,
            exit_code=exit_code,
        )
    elif not conversation_id:
        error = NoConversationId(
            f"{harness.name} reported no conversation id, so the next turn could not resume",
            harness=harness.name,
        )
    elif spec.conversation_id and conversation_id != spec.conversation_id:
        error = ConversationMismatch(
            f"{harness.name} was asked to resume {spec.conversation_id} "
            f"but continued {conversation_id}",
            harness=harness.name,
            expected=spec.conversation_id,
            actual=conversation_id,
        )
    elif spec.fork_from and conversation_id == spec.fork_from:
        error = ConversationMismatch(
            f"{harness.name} was asked to fork {spec.fork_from} but continued it instead",
            harness=harness.name,
            expected="a new conversation",
            actual=conversation_id,
        )
    elif chosen_id and not spec.conversation_id and conversation_id != chosen_id:
        error = ConversationMismatch(
            f"{harness.name} was asked to start {chosen_id} but started {conversation_id}",
            harness=harness.name,
            expected=chosen_id,
            actual=conversation_id,
        )
    return TurnResult(exit_code, conversation_id, summary, usage, error)


def get_harness(name: str) -> Harness:
    """The adapter called ``name``; UnknownHarness (listing the known ones) otherwise."""
    from hangar.harnesses.antigravity import Antigravity
    from hangar.harnesses.claude import ClaudeCode
    from hangar.harnesses.codex import Codex
    from hangar.harnesses.pi import Pi

    known: dict[str, Harness] = {
        "claude": ClaudeCode(),
        "codex": Codex(),
        "pi": Pi(),
        "antigravity": Antigravity(),
    }
    try:
        return known[name]
    except KeyError:
        raise UnknownHarness(
            f"unknown harness {name!r} (known: {', '.join(sorted(known))})", harness=name
        ) from None


HARNESS_NAMES = ("claude", "codex", "pi", "antigravity")

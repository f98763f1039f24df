"""Antigravity (``agy``). UNVERIFIED: its CLI cannot be installed here, so this adapter follows
the spec and the interface pinned in the project's issue, and is tested against a scripted
stand-in of that interface only.

Assumed interface: a turn is ``agy -p --output-format stream-json -- PROMPT`` (the message after
``--``, so that one starting with a dash is not an option; one argument holds at most 128 KiB),
resumed with
``--conversation ID``; the first event is ``{"type": "init", "conversation_id": ID, ...}``;
assistant text arrives as ``{"type": "message", "role": "assistant", "content": ...}`` events and
a closing ``{"type": "result", "result": TEXT, "usage": {...}}``. Conversations live in
``~/.gemini/antigravity-cli/conversations/<id>.db``. An unknown id silently starts a new
conversation: the post-turn check sees the init event's id differ from the one asked for and
records a failed turn. It has no fork: a fork hands off (:mod:`hangar.harnesses.handoff`).
Interactively (the terminal's agent mode) it is assumed to be ``agy --conversation ID``.
"""

from __future__ import annotations

from typing import Any

from hangar.errors import HarnessError
from hangar.harnesses import (
    Invocation,
    TurnResult,
    TurnSpec,
    check,
    conversation_of,
    json_lines,
    result_event,
    text_of,
)


class Antigravity:
    name = "antigravity"
    binary = "agy"
    conversation_dirs: tuple[str, ...] = (".gemini/antigravity-cli/conversations",)
    can_resume = True
    can_ask = False
    can_steer = False
    can_fork = False
    # One argument holds at most 128 KiB (MAX_ARG_STRLEN); hangar's notes on a prompt (the
    # exchange, a handoff) take the rest.
    max_message_bytes: int | None = 120 << 10

    def command(self, spec: TurnSpec) -> Invocation:
        if spec.fork_from:
            raise HarnessError(
                "antigravity cannot fork a conversation; start a new one with a handoff prompt",
                harness=self.name,
            )
        argv = [self.binary, "-p", "--output-format", "stream-json"]
        if spec.model:
            argv += ["--model", spec.model]
        if spec.conversation_id:
            argv += ["--conversation", spec.conversation_id]
        return Invocation(argv=[*argv, "--", spec.prompt])

    def live(self, spec: TurnSpec) -> None:
        return None  # its CLI cannot be tried here: its turns stay one-shot

    def interactive(self, spec: TurnSpec) -> Invocation:
        argv = [self.binary, "--conversation", conversation_of(self, spec)]
        if spec.model:
            argv += ["--model", spec.model]
        return Invocation(argv=argv)

    def home_files(self, spec: TurnSpec) -> dict[str, dict[str, Any]]:
        return {}

    def outcome(self, spec: TurnSpec, exit_code: int, stdout: bytes, stderr: bytes) -> TurnResult:
        conversation: str | None = None
        summary: str | None = None
        usage: dict[str, int] = {}
        failure: str | None = None
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == "init" and isinstance(event.get("conversation_id"), str):
                conversation = conversation or event["conversation_id"]
            elif kind == "message" and event.get("role") == "assistant":
                summary = text_of(event.get("content")) or summary
            elif kind == "result":
                summary, usage, failure = result_event(event, summary)
        return check(self, spec, exit_code, stderr, conversation, summary, usage, failure)

    def resume_hint(self, conversation_id: str) -> str:
        return f"agy --conversation {conversation_id}"

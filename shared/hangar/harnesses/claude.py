"""Claude Code (``claude``): ``-p`` turns with ``--output-format stream-json``, the message read
from standard input (with no prompt argument, ``-p`` reads it byte for byte).

A first turn names its conversation with ``--session-id UUID`` (hangar picks it); later turns
``--resume UUID``; a fork resumes the original with ``--fork-session`` and names the branch with
``--session-id NEW``. Permission prompts are off (``--dangerously-skip-permissions``, which as
root needs ``IS_SANDBOX=1``): the sandbox is the boundary. Conversations live in
``~/.claude/projects/<cwd slug>/<uuid>.jsonl``; credentials live elsewhere in ``~/.claude``.
Interactively (the terminal's agent mode) it is ``claude --resume UUID``, permission prompts on:
a person answers them.
"""

from __future__ import annotations

import json
from typing import Any

from hangar.errors import InvalidInput
from hangar.harnesses import (
    Invocation,
    LiveInvocation,
    TurnResult,
    TurnSpec,
    check,
    conversation_of,
    json_lines,
    result_event,
    text_of,
)

_ENV = {
    "IS_SANDBOX": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


class ClaudeCode:
    name = "claude"
    binary = "claude"
    conversation_dirs: tuple[str, ...] = (".claude/projects",)
    can_resume = True
    can_ask = True
    can_steer = True
    can_fork = True
    max_message_bytes: int | None = None

    def command(self, spec: TurnSpec) -> Invocation:
        return Invocation(argv=self._argv(spec, []), env=dict(_ENV), stdin=spec.prompt.encode())

    def live(self, spec: TurnSpec) -> LiveInvocation:
        # The message and every steer go to standard input as stream-json user lines
        # (hangar.agent.claudelive); the output is the same stream as a one-shot turn's.
        return LiveInvocation(argv=self._argv(spec, ["--input-format", "stream-json"]),
                              env=dict(_ENV))  # fmt: skip

    def _argv(self, spec: TurnSpec, extra: list[str]) -> list[str]:
        argv = [self.binary, "-p", *extra, "--output-format", "stream-json", "--verbose"]
        if spec.asks and extra:  # live: each permission request comes to the driver
            argv += ["--permission-prompt-tool", "stdio"]
        else:
            argv.append("--dangerously-skip-permissions")
        if spec.model:
            argv += ["--model", spec.model]
        if spec.conversation_id:
            argv += ["--resume", spec.conversation_id]
        elif spec.fork_from:
            argv += ["--resume", spec.fork_from, "--fork-session", "--session-id", self._id(spec)]
        else:
            argv += ["--session-id", self._id(spec)]
        return argv

    def interactive(self, spec: TurnSpec) -> Invocation:
        argv = [self.binary, "--resume", conversation_of(self, spec)]
        if spec.model:
            argv += ["--model", spec.model]
        # A sandbox's HOME is new to Claude Code, so its interactive mode would first run the
        # first-start onboarding, whose connectivity check calls Anthropic's own host (refused
        # in a sandbox that can reach only its model endpoint), then ask to trust the folder.
        # IS_DEMO skips both in this release (and hides the account's e-mail and organization);
        # the sandbox is the boundary, as for turns. Without the onboarding, an API key in the
        # environment is not approved for interactive use: a key helper that prints it is (the
        # command line names the variable, never its value).
        if "ANTHROPIC_API_KEY" in spec.env:
            helper = {"apiKeyHelper": "printenv ANTHROPIC_API_KEY"}
            argv += ["--settings", json.dumps(helper)]
        return Invocation(argv=argv, env={**_ENV, "IS_DEMO": "1"})

    @staticmethod
    def _id(spec: TurnSpec) -> str:
        if not spec.new_id:
            raise InvalidInput("a new Claude Code conversation needs an id (TurnSpec.new_id)")
        return spec.new_id

    def home_files(self, spec: TurnSpec) -> dict[str, dict[str, Any]]:
        return {}

    def outcome(self, spec: TurnSpec, exit_code: int, stdout: bytes, stderr: bytes) -> TurnResult:
        conversation: str | None = None
        summary: str | None = None
        usage: dict[str, int] = {}
        failure: str | None = None
        for event in json_lines(stdout):
            if isinstance(event.get("session_id"), str):
                conversation = event["session_id"]
            if event.get("type") == "assistant":
                text = text_of(event.get("message", {}).get("content"))
                if text:
                    summary = text
            if event.get("type") == "result":
                summary, usage, failure = result_event(event, summary)
        return check(
            self, spec, exit_code, stderr, conversation, summary, usage, failure, spec.new_id
        )

    def resume_hint(self, conversation_id: str) -> str:
        return f"claude --resume {conversation_id}"


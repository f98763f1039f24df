"""pi, through its RPC mode (``pi --mode rpc``), driven for one turn by
:mod:`hangar.agent.pirpc`: the message, read from standard input, goes to pi in a ``prompt``
command, which carries it exactly (``-p`` trims what it reads on standard input), and the run log
is pi's events with its answers to the driver's commands.

This release has no ``--session-id``: the conversation id is the ``sessionId`` of the answer to
the driver's first command (``get_state``), there before the turn starts; later turns pass
``--session ID`` (an unknown id fails loudly) and a fork ``--fork ID``. pi asks no permissions.
The model is ``provider/id``; when the turn's environment has ``OPENAI_BASE_URL``, the adapter
declares a ``hangar`` provider for it in ``~/.pi/agent/models.json`` (Chat Completions, key from
``OPENAI_API_KEY``) and uses ``hangar/<model>``. Conversations live in
``~/.pi/agent/sessions/<cwd slug>/<ts>_<id>.jsonl``. Interactively (the terminal's agent mode)
it is ``pi --session ID`` with the same model.
"""

from __future__ import annotations

from typing import Any

from hangar import agent
from hangar.harnesses import (
    Invocation,
    LiveInvocation,
    TurnResult,
    TurnSpec,
    check,
    conversation_of,
    json_lines,
    text_of,
)

PROVIDER = "hangar"
_ENV = {"PI_OFFLINE": "1"}


class Pi:
    name = "pi"
    binary = "pi"
    conversation_dirs: tuple[str, ...] = (".pi/agent/sessions",)
    can_resume = True
    can_ask = False
    can_steer = True
    can_fork = True
    max_message_bytes: int | None = None

    def command(self, spec: TurnSpec) -> Invocation:
        return Invocation(argv=agent.command("pirpc", *self._argv(spec)), env=dict(_ENV),
                          stdin=spec.prompt.encode())  # fmt: skip

    def live(self, spec: TurnSpec) -> LiveInvocation:
        # The same RPC mode, spoken to by hangar.agent.pilive (steer, abort, a later prompt).
        return LiveInvocation(argv=self._argv(spec), env=dict(_ENV))

    def _argv(self, spec: TurnSpec) -> list[str]:
        argv = [self.binary, "--mode", "rpc", *_model(spec)]
        if spec.conversation_id:
            argv += ["--session", spec.conversation_id]
        elif spec.fork_from:
            argv += ["--fork", spec.fork_from]
        return argv

    def interactive(self, spec: TurnSpec) -> Invocation:
        argv = [self.binary, *_model(spec), "--session", conversation_of(self, spec)]
        return Invocation(argv=argv, env={"PI_OFFLINE": "1"})

    def home_files(self, spec: TurnSpec) -> dict[str, dict[str, Any]]:
        base_url = spec.env.get("OPENAI_BASE_URL")
        if not base_url:
            return {}
        provider = {
            "baseUrl": base_url,
            "api": "openai-completions",
            "apiKey": "OPENAI_API_KEY",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": spec.model or "default", "contextWindow": 128000, "maxTokens": 16384}],
        }
        return {".pi/agent/models.json": {"providers": {PROVIDER: provider}}}

    def outcome(self, spec: TurnSpec, exit_code: int, stdout: bytes, stderr: bytes) -> TurnResult:
        conversation: str | None = None
        summary: str | None = None
        usage: dict[str, int] = {}
        failure: str | None = None
        for event in json_lines(stdout):
            kind = event.get("type")
            answered = event.get("command") if kind == "response" else None  # the driver's
            if answered == "get_state" and conversation is None:
                data = event.get("data")
                if isinstance(data, dict) and isinstance(data.get("sessionId"), str):
                    conversation = data["sessionId"]
            elif answered == "prompt" and not event.get("success"):
                failure = f"pi refused the prompt: {event.get('error') or 'no reason given'}"
            elif kind == "session" and isinstance(event.get("id"), str) and conversation is None:
                conversation = event["id"]  # a log of ``-p --mode json`` (a turn started before)
            elif kind == "agent_end":
                failure = None  # only the last attempt's (pi retries a failed one)
                for message in event.get("messages") or []:
                    if not isinstance(message, dict) or message.get("role") != "assistant":
                        continue
                    summary = text_of(message.get("content")) or summary
                    if message.get("stopReason") == "error" and message.get("errorMessage"):
                        failure = str(message["errorMessage"])
                    for key, value in (message.get("usage") or {}).items():
                        if isinstance(value, int) and not isinstance(value, bool):
                            usage[key] = usage.get(key, 0) + value
        return check(self, spec, exit_code, stderr, conversation, summary, usage, failure)

    def resume_hint(self, conversation_id: str) -> str:
        return f"pi --session {conversation_id}"


def _model(spec: TurnSpec) -> list[str]:
    """The model's option: ``provider/id``, the ``hangar`` provider's on a custom endpoint."""
    model = spec.model
    if spec.env.get("OPENAI_BASE_URL"):
        model = f"{PROVIDER}/{spec.model or 'default'}"
    return ["--model", model] if model else []

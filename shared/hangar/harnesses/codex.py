"""Codex (``codex exec --json``).

A first turn is a plain ``codex exec``, its message read from standard input (the prompt
argument ``-``); its conversation id is the ``thread_id`` of the first
JSON line. Later turns are ``codex exec resume ID``; a fork is ``codex exec fork ID`` (a new
thread id). Approvals and Codex's own sandbox are off
(``--dangerously-bypass-approvals-and-sandbox``): the hangar sandbox is the boundary. Only the
Responses wire API works with custom endpoints: when the turn's environment has
``OPENAI_BASE_URL``, a ``hangar`` provider pointing at it (key from ``OPENAI_API_KEY``) is set
with ``-c`` overrides (the one key hangar merges into ``~/.codex/config.toml`` marks the repo
folder trusted; everything else there is the environment's); such a turn needs a model (HarnessError
without one: Codex's default is one of OpenAI's own, and it would do nothing there). Conversations live in
``~/.codex/sessions/YYYY/MM/DD/rollout-*-<id>.jsonl``. Interactively (the terminal's agent mode)
it is ``codex resume ID`` with the same model and provider, approvals on (a person answers
them) and Codex's own sandbox off (``--sandbox danger-full-access``: it cannot nest in hangar's).

A live turn (one that can be steered and interrupted while it runs) runs ``codex app-server``
instead (:meth:`Codex.live_argv`: JSON-RPC lines on its standard input and output, with the same
``-c`` provider overrides; the model, the folder, approvals never and Codex's sandbox off go in
its ``thread/start``, ``thread/resume`` or ``thread/fork`` request). The steering driver speaks
to it through :mod:`hangar.agent.codexlive`, which writes the run log in ``codex exec --json``'s
lines, so :meth:`Codex.outcome` reads a live turn's log as it reads a one-shot turn's.
"""

from __future__ import annotations

import json
from typing import Any

from hangar.errors import HarnessError
from hangar.harnesses import (
    Invocation,
    LiveInvocation,
    TurnResult,
    TurnSpec,
    check,
    conversation_of,
    int_fields,
    json_lines,
)


class Codex:
    name = "codex"
    binary = "codex"
    conversation_dirs: tuple[str, ...] = (".codex/sessions",)
    can_resume = True
    can_ask = True
    can_steer = True
    can_fork = True
    max_message_bytes: int | None = None

    def command(self, spec: TurnSpec) -> Invocation:
        argv = [self.binary, "exec", "--json", "--skip-git-repo-check"]
        argv.append("--dangerously-bypass-approvals-and-sandbox")
        argv += self._model(spec)
        if spec.conversation_id:
            argv += ["resume", spec.conversation_id]
        elif spec.fork_from:
            argv += ["fork", spec.fork_from]
        argv.append("-")
        return Invocation(argv=argv, stdin=spec.prompt.encode())

    def interactive(self, spec: TurnSpec) -> Invocation:
        conversation = conversation_of(self, spec)
        argv = [self.binary, "resume", "--sandbox", "danger-full-access", *self._model(spec)]
        return Invocation(argv=[*argv, "--", conversation])

    def live(self, spec: TurnSpec) -> LiveInvocation:
        # The thread's settings (model, folder, approvals never, Codex's sandbox off) go in
        # the app-server's requests (hangar.agent.codexlive), which also writes the log as
        # `codex exec --json` lines.
        options = {"cwd": spec.cwd, "model": spec.model, "conversation_id": spec.conversation_id,
                   "fork_from": spec.fork_from, "asks": spec.asks}  # fmt: skip
        return LiveInvocation(argv=self.live_argv(spec), options=options)

    def live_argv(self, spec: TurnSpec) -> list[str]:
        """``codex app-server`` for a live turn of ``spec``: the provider overrides only (the
        model and the rest go in the thread's request). Raises HarnessError like
        :meth:`command` on a custom endpoint without a model."""
        return [self.binary, "app-server", *self._provider(spec)]

    def _model(self, spec: TurnSpec) -> list[str]:
        """The model's options, and a ``hangar`` provider for a custom endpoint."""
        argv = ["--model", spec.model] if spec.model else []
        return argv + self._provider(spec)

    def _provider(self, spec: TurnSpec) -> list[str]:
        """``-c`` overrides setting a ``hangar`` provider when the turn has a custom endpoint."""
        argv: list[str] = []
        base_url = spec.env.get("OPENAI_BASE_URL")
        if base_url and not spec.model:
            # Codex's default model is one of OpenAI's own: on another endpoint its requests
            # come without tools and the turn does nothing, silently.
            raise HarnessError("codex on a custom endpoint (OPENAI_BASE_URL) needs a model: "
                               "give one with --model", harness=self.name)  # fmt: skip
        if base_url:
            provider = {
                "name": "hangar",
                "base_url": base_url,
                "env_key": "OPENAI_API_KEY",
                "wire_api": "responses",
            }
            inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in provider.items())
            argv += ["-c", 'model_provider="hangar"', "-c", f"model_providers.hangar={{{inline}}}"]
        return argv

    def home_files(self, spec: TurnSpec) -> dict[str, dict[str, Any]]:
        # The repo folder marked trusted: Codex's interactive resume asks a person to trust a
        # folder it has not seen before, and a sandbox's HOME is always new to it (the folder
        # is the agent's own workspace: the sandbox is the boundary). Merged into the file: an
        # environment configures Codex there too (its model providers, as Codex's docs do).
        return {".codex/config.toml": {"projects": {spec.cwd: {"trust_level": "trusted"}}}}

    def outcome(self, spec: TurnSpec, exit_code: int, stdout: bytes, stderr: bytes) -> TurnResult:
        conversation: str | None = None
        summary: str | None = None
        usage: dict[str, int] = {}
        failure: str | None = None
        for event in json_lines(stdout):
            kind = event.get("type")
            if kind == "thread.started" and isinstance(event.get("thread_id"), str):
                conversation = conversation or event["thread_id"]
            elif kind == "item.completed":
                item = event.get("item") or {}
                if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                    summary = item["text"]
            elif kind == "turn.completed":
                usage = int_fields(event.get("usage"))
                failure = None  # errors before it were retries that recovered
            elif kind in ("turn.failed", "error"):
                error = event.get("error")
                message = error.get("message") if isinstance(error, dict) else event.get("message")
                failure = str(message or kind)
        return check(self, spec, exit_code, stderr, conversation, summary, usage, failure)

    def resume_hint(self, conversation_id: str) -> str:
        return f"codex resume {conversation_id}"

"""A message is data, never an argument: whatever a person writes reaches the real Claude Code,
Codex and pi CLIs (in local sandboxes, against the model stub) as it was written, shown by the
requests the stub logged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulators.model import ModelStub
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.harnesses import TurnSpec, get_harness
from hangar.harnesses.runs import wait_run
from hangar.harnesses.turns import start_turn, turn_result
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes
from tests.conftest import GIT_IDENTITY
from tests.harness.conftest import harness_dir
from tests.rig import make_engine

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

MESSAGES = {
    "a markdown list": "- fix the typo\n- and the one below it",
    "an option's name": "--help",
    "blank lines around it": "\n\n  the task, indented, between blank lines\n\n",
    "quotes and shell characters": "it's \"quoted\" `$(touch /tmp/owned)` ; | & * $HOME \\n",
    "non-ASCII": "café, 東京, emoji 🚀",
    "200 KiB": "- " + "a long line of the task, " * 8000,
}
MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5-codex", "pi": "stub-model"}
API = {"claude": "anthropic", "codex": "responses", "pi": "chat"}


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub({"rules": [], "models": list(MODELS.values())}) as running:
        yield running


def user_texts(body: dict[str, Any]) -> list[str]:
    """The texts of the user's messages in a logged request (each API's shape)."""
    items = body.get("messages") or body.get("input") or []
    return [s for item in items if isinstance(item, dict) and item.get("role") == "user"
            for s in strings(item.get("content"))]  # fmt: skip


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.mark.parametrize("name", ["claude", "codex", "pi"])
def test_every_shape_of_message_reaches_the_cli_as_written(
    name: str,
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    tmp_path: Path,
    remote: Path,
    stub: ModelStub,
) -> None:
    harness = get_harness(name)
    sandboxes = LocalSandboxes(tmp_path / "sandboxes", harness_dir())
    engine = make_engine(settings, db, blobs, keys, sandboxes, remote, harness=name,
                         conversation_dirs=harness.conversation_dirs,
                         host_ports=[stub.port])  # fmt: skip
    if name == "claude":
        endpoint = {"ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-stub"}
    else:
        endpoint = {"OPENAI_BASE_URL": f"{stub.url}/v1", "OPENAI_API_KEY": "sk-stub"}
    try:
        sandbox, _ = engine.sandbox()
        conversation: str | None = None
        for shape, message in MESSAGES.items():
            stub.clear_requests()
            spec = TurnSpec(message, "/workspace/app", model=MODELS[name],
                            env={**GIT_IDENTITY, **endpoint}, conversation_id=conversation,
                            new_id=None if conversation else str(uuid.uuid4()))  # fmt: skip
            run_id = f"run-{uuid.uuid4().hex[:8]}"
            start_turn(sandboxes, sandbox, harness, spec, run_id)
            log, code = wait_run(sandboxes, sandbox, run_id, timeout=180)
            result = turn_result(sandboxes, sandbox, harness, spec, run_id, log, code)
            assert result.ok, (shape, result.error, log.decode(errors="replace")[-2000:])
            conversation = result.conversation_id
            sent = [s for r in stub.requests(API[name]) for s in user_texts(r["body"])]
            assert message in sent, f"{shape} did not arrive as written: {sent!r:.600}"
    finally:
        for info in sandboxes.list():
            sandboxes.destroy(info.id, hooks=False)

"""A message is data, never an argument: whatever a person writes reaches the real Claude Code,
Codex and pi CLIs (in local sandboxes, against the model stub) as it was written, shown by the
requests the stub logged."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from emulators.model import ModelStub
from tests.harness.conftest import API, MODELS, Agent

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

MESSAGES = {
    "a markdown list": "- fix the typo\n- and the one below it",
    "an option's name": "--help",
    "blank lines around it": "\n\n  the task, indented, between blank lines\n\n",
    "quotes and shell characters": "it's \"quoted\" `$(touch /tmp/owned)` ; | & * $HOME \\n",
    "non-ASCII": "café, 東京, emoji 🚀",
    "200 KiB": "- " + "a long line of the task, " * 8000,
}


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


def test_every_shape_of_message_reaches_the_cli_as_written(agent: Agent) -> None:
    stub, name = agent.stub, agent.harness.name
    sandbox, _ = agent.engine.sandbox()
    conversation: str | None = None
    for shape, message in MESSAGES.items():
        stub.clear_requests()
        spec = agent.spec(message, conversation_id=conversation,
                          new_id=None if conversation else str(uuid.uuid4()))  # fmt: skip
        conversation = agent.turn(sandbox, spec).conversation_id
        sent = [s for r in stub.requests(API[name]) for s in user_texts(r["body"])]
        assert message in sent, f"{shape} did not arrive as written: {sent!r:.600}"

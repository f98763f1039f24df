"""What the in-sandbox context script answers is untrusted (it ran where the agent's processes
can reach it): the session's new base is only ever the base_commit checked at the request."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.errors import ContextRejected, SandboxError
from hangar.exchange import intake
from hangar.exchange.context import ContextItem, ContextStore
from hangar.exchange.uploads import Uploads
from hangar.keys.local import LocalKeys
from hangar.models import Session, Turn
from hangar.sandboxes import ExecResult

BASE = "a" * 40


class Answering:
    """A sandbox whose context script answers ``answer``; it records the files put."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.files: dict[str, bytes] = {}

    def put_file(self, sandbox_id: str, path: str, data: bytes, **_: Any) -> None:
        self.files[path] = data

    def exec(self, sandbox_id: str, argv: list[str], **_: Any) -> ExecResult:
        if argv[0] == "sh":  # removing the copies
            return ExecResult(0)
        return ExecResult(0, json.dumps(self.answer).encode() + b"\n")


def delivered(settings: Settings, blobs: LocalBlobs, keys: LocalKeys, answer: dict[str, Any],
              *items: ContextItem) -> tuple[str | None, Answering]:  # fmt: skip
    store = ContextStore(settings, blobs, keys, Uploads(settings, blobs, keys))
    session = Session(name="s", environment="app", harness="claude", sandbox_id="sbx-1",
                      repo="/r/app.git", base_commit="b" * 40)  # fmt: skip
    turn = Turn(session_id=session.id, n=1, message="m",
                context=store.accept(session.id, 1, list(items)).refs)  # fmt: skip
    sandbox = Answering(answer)
    return intake.deliver(sandbox, store, session, turn, "/workspace/app"), sandbox  # type: ignore[arg-type]


def bundle() -> ContextItem:
    return ContextItem(kind="bundle", content=base64.b64encode(b"# v2 git bundle\n").decode(),
                       encoding="base64", base_commit=BASE)  # fmt: skip


def test_a_fresh_start_gives_the_bundles_own_base(settings: Settings, blobs: LocalBlobs,
                                                  keys: LocalKeys) -> None:  # fmt: skip
    base, sandbox = delivered(settings, blobs, keys, {"ok": True, "base": BASE}, bundle(),
                              ContextItem(kind="file", name="a.txt", content="hi"))  # fmt: skip
    assert base == BASE
    assert sandbox.files["/root/.hangar/sessions/s/in/1/a.txt"] == b"hi"


@pytest.mark.parametrize("forged", ["--output=/hangar/lib/x", "c" * 40])
def test_a_base_the_script_was_not_sent_is_refused(settings: Settings, blobs: LocalBlobs,
                                                   keys: LocalKeys, forged: str) -> None:  # fmt: skip
    with pytest.raises(SandboxError, match="a base it was not sent"):
        delivered(settings, blobs, keys, {"ok": True, "base": forged}, bundle())
    patch = ContextItem(kind="patch", content="diff --git a/x b/x\n")
    with pytest.raises(SandboxError, match="a base it was not sent"):  # no bundle: no base
        delivered(settings, blobs, keys, {"ok": True, "base": BASE}, patch)


def test_a_refusal_is_context_rejected_with_the_scripts_reason(
    settings: Settings, blobs: LocalBlobs, keys: LocalKeys
) -> None:
    with pytest.raises(ContextRejected, match="the patch does not apply: nope"):
        delivered(settings, blobs, keys, {"ok": False, "reason": "the patch does not apply: nope"},
                  ContextItem(kind="patch", content="diff --git a/x b/x\n"))  # fmt: skip

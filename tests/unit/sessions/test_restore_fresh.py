"""What the control plane tells the in-sandbox restore about the tree it restores into."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

from hangar.config import Settings
from hangar.db import Db
from hangar.blobs import Blobs
from hangar.keys import Keys
from hangar.models import Checkpoint
from hangar.sandboxes import ExecResult, SandboxCapabilities, Sandboxes
from hangar.checkpoints.restore import Restorer
from hangar.testing.db import make_checkpoint

FAILED = {"ok": False, "code": "restore_failed", "step": "checkout", "error": "no head"}


class Checkpoints:
    def __init__(self, checkpoints: list[Checkpoint]) -> None:
        self.checkpoints = checkpoints

    def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        return self.checkpoints


class OneKey:
    def unwrap(self, wrapped: bytes) -> bytes:
        return b"k" * 32


class Restores:
    """A sandbox whose restores answer from ``answers`` in turn, keeping each plan sent."""

    capabilities = SandboxCapabilities()

    def __init__(self, answers: list[dict[str, object]]) -> None:
        self.answers = answers
        self.plans: list[dict[str, Any]] = []

    def exec(self, sandbox_id: str, argv: list[str], *, stdin: Any = None,
             **options: Any) -> ExecResult:  # fmt: skip
        sent = b"".join(cast(Iterable[bytes], stdin))
        self.plans.append(json.loads(sent.split(b"\n", 1)[0]))
        answer = self.answers[len(self.plans) - 1]
        return ExecResult(exit_code=0 if answer["ok"] else 3,
                          stdout=json.dumps(answer).encode() + b"\n", stderr=b"")  # fmt: skip


def restorer(sandbox: Restores, checkpoints: list[Checkpoint], tmp: str) -> Restorer:
    settings = Settings.build(data_dir=tmp)
    return Restorer(cast(Db, Checkpoints(checkpoints)), cast(Blobs, None), cast(Keys, OneKey()),
                    cast(Sandboxes, sandbox), settings)  # fmt: skip


def test_only_the_first_checkpoint_tried_restores_into_a_tree_called_fresh(tmp_path: Any) -> None:
    older, newer = (make_checkpoint("ses-1", n, head="a" * 40) for n in (1, 2))
    sandbox = Restores([FAILED, {"ok": True, "warnings": []}])
    report = restorer(sandbox, [older, newer], str(tmp_path)).restore("ses-1", "box", "/w/app",
                                                                      fresh=True)  # fmt: skip
    assert report is not None and report.checkpoint == older and report.fell_back
    assert [plan["fresh"] for plan in sandbox.plans] == [True, False]


def test_a_restore_not_called_fresh_never_tells_the_sandbox_so(tmp_path: Any) -> None:
    sandbox = Restores([{"ok": True, "warnings": []}])
    checkpoint = make_checkpoint("ses-1", 1, head="a" * 40)
    restorer(sandbox, [checkpoint], str(tmp_path)).restore("ses-1", "box", "/w/app")
    assert sandbox.plans[0]["fresh"] is False
